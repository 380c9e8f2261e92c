#pragma once
// The graph IR: the whole training step of one rank as tensors and nodes in
// issue order (the graph is static, so issue order is a valid topological
// order). The model builder emits the forward, autodiff appends backward
// nodes, passes rewrite it (recompute, buckets, collectives, optimizer), and
// lowering turns it into a RankPlan (streams, events, memory offsets).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/ir/op_attrs.h"
#include "engine/ir/types.h"
#include "engine/plan/plan.h"

namespace tandem {

struct Tensor {
  int id = -1;
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  TensorCategory category = TensorCategory::Activation;
  int layer = -1;
  int micro_batch = -1;
  // Position inside a transformer block ("ln1.out", "qkv", ...); recompute
  // policies are expressed as sets of roles to drop.
  std::string role;
  bool persistent = false;  // lives for the whole step (parameters, optimizer state)
  bool requires_grad = false;
  int parent = -1;  // view of another tensor ...
  int64_t parent_offset_bytes = 0;

  int64_t elements() const;
  int64_t bytes() const { return elements() * dtypeSize(dtype); }
};

struct Node {
  OpKind op = OpKind::Add;
  std::string name;
  Phase phase = Phase::Forward;
  int layer = -1;
  int micro_batch = -1;
  std::vector<int> inputs;   // tensor ids, in the op's input order
  std::vector<int> outputs;  // tensor ids, in the op's output order
  OpAttrs attrs;
  std::optional<CollectiveInfo> collective;
  StreamKind stream = StreamKind::Compute;
  // A stream of that kind other than its default one ("compute", "comm"):
  // lowering gives each name a stream of its own ("comm.send").
  std::string stream_name;
};

// Parameter bookkeeping kept beside the graph (indices are tensor ids).
struct ParamTensors {
  std::string name;
  int param = -1;
  int grad = -1;
  int master = -1;
  int adam_m = -1;
  int adam_v = -1;
  bool weight_decay = true;
  int bucket = -1;
  int split_dim = -1;  // tensor parallelism: as ParamInfo::split_dim
  int split_blocks = 1;
  int copies = 1;  // as ParamInfo::copies
};

struct BucketTensors {
  int flat = -1;              // the bucket's flat gradient tensor
  int param_flat = -1;        // sharded optimizer: the flat parameter tensor (same layout)
  int param_shard = -1;       // sharded parameters: this rank's persistent shard of param_flat
  int grad_shard = -1;        // sharded parameters: this rank's reduce-scattered shard of flat
  // Sharded optimizer: this rank's shard of the fp32 master weights (bf16
  // jobs; fp32 jobs update the parameter shard itself) and of the moments.
  int master_shard = -1, adam_m_shard = -1, adam_v_shard = -1;
  std::vector<int> params;    // indices into Graph::params
};

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;
  std::vector<ParamTensors> params;
  std::vector<BucketTensors> buckets;

  int addTensor(Tensor t);
  // A transient tensor shaped like tensor `like` (dtype, shape, category,
  // layer, role), named `name`: a view at `like`'s offset into `parent`, or
  // a buffer of its own when parent < 0. Copies of parameters and
  // gradients per micro-batch are made with it.
  int addCopyOf(int like, std::string name, int parent, int micro_batch);
  Node& addNode(Node n);
  // Inserts each node right after (or, with `before`, right before) the
  // node at its index in `nodes` as it is now; nodes at one index keep
  // their order in `inserts`.
  void insertNodes(std::vector<std::pair<size_t, Node>> inserts, bool before = false);
  Tensor& tensor(int id) { return tensors.at(id); }
  const Tensor& tensor(int id) const { return tensors.at(id); }
};

}  // namespace tandem
