#include "engine/numerics/data.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>

#include "engine/numerics/init.h"
#include "engine/numerics/rng.h"

namespace tandem {
namespace {

// An order-k Markov chain whose every context has the same successor
// distribution up to a permutation: `branching` successors with probabilities
// proportional to 2^-i. The entropy of the next token is therefore the same
// for every context, so the optimal loss is exact whatever the context
// distribution. The first k tokens of a sample are uniform.
class MarkovSource : public TokenSource {
 public:
  MarkovSource(int vocab, int seq_len, int order, int branching, uint64_t seed)
      : V_(vocab), T_(seq_len), k_(order), m_(branching), seed_(seed) {
    double total = 0;
    for (int i = 0; i < m_; ++i) total += std::ldexp(1.0, -i);
    double h = 0;
    cdf_.resize(m_);
    double acc = 0;
    for (int i = 0; i < m_; ++i) {
      const double p = std::ldexp(1.0, -i) / total;
      h -= p * std::log(p);
      acc += p;
      cdf_[i] = acc;
    }
    cdf_.back() = 1.0;
    entropy_ = h;
  }

  void sample(int64_t s, int32_t* tokens, int32_t* targets) const override {
    SplitMix64 rng(seed_ ^ (uint64_t(s) * 0xD1B54A32D192ED03ull + 0x7A11ull));
    std::vector<int32_t> x(T_ + 1);
    for (int j = 0; j <= T_; ++j) {
      if (j < k_) {
        x[j] = int32_t(rng.below(V_));
        continue;
      }
      uint64_t ctx = 0x1234567ull;
      for (int i = j - k_; i < j; ++i) ctx = ctx * 1000003ull + uint64_t(x[i]);
      SplitMix64 ctx_rng(ctx ^ seed_);
      const uint64_t base = ctx_rng.below(V_);
      uint64_t stride = 1 + ctx_rng.below(std::max(1, V_ - 1));
      if (std::gcd(stride, uint64_t(V_)) != 1) stride = 1;
      const double u = rng.uniform();
      int pick = 0;
      while (pick < m_ - 1 && u >= cdf_[pick]) ++pick;
      x[j] = int32_t((base + uint64_t(pick) * stride) % uint64_t(V_));
    }
    for (int j = 0; j < T_; ++j) {
      tokens[j] = x[j];
      targets[j] = x[j + 1];
    }
  }

  double optimalLoss() const override {
    // Target j (1..T) is uniform while it has fewer than k predecessors.
    double sum = 0;
    for (int j = 1; j <= T_; ++j) sum += j < k_ ? std::log(double(V_)) : entropy_;
    return sum / T_;
  }

  std::string describe() const override {
    return fmt::format("synthetic order-{} Markov chain, {} successors per context, {:.4f} nats/token "
                       "optimal loss",
                       k_, m_, optimalLoss());
  }

 private:
  int V_, T_, k_, m_;
  uint64_t seed_;
  std::vector<double> cdf_;
  double entropy_ = 0;
};

class FileSource : public TokenSource {
 public:
  FileSource(const std::string& path, int vocab, int seq_len) : path_(path), T_(seq_len) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw SpecError(fmt::format("{}: data.path: cannot open the token file", path));
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (raw.size() % 2 != 0)
      throw SpecError(fmt::format("{}: data.path: odd file size {} (expected uint16 tokens)", path, raw.size()));
    tokens_.resize(raw.size() / 2);
    for (size_t i = 0; i < tokens_.size(); ++i) {
      tokens_[i] = uint16_t(uint8_t(raw[2 * i]) | (uint16_t(uint8_t(raw[2 * i + 1])) << 8));
      if (tokens_[i] >= vocab)
        throw SpecError(fmt::format("{}: data.path: token {} at index {} is outside the vocabulary of {}",
                                    path, tokens_[i], i, vocab));
    }
    if (int64_t(tokens_.size()) < T_ + 1)
      throw SpecError(fmt::format("{}: data.path: {} tokens, fewer than seq_len + 1 = {}", path,
                                  tokens_.size(), T_ + 1));
  }

  void sample(int64_t s, int32_t* tokens, int32_t* targets) const override {
    const int64_t windows = int64_t(tokens_.size()) - T_;
    const int64_t start = (s * T_) % windows;
    for (int j = 0; j < T_; ++j) {
      tokens[j] = tokens_[start + j];
      targets[j] = tokens_[start + j + 1];
    }
  }
  double optimalLoss() const override { return std::numeric_limits<double>::quiet_NaN(); }
  std::string describe() const override {
    return fmt::format("token file {} ({} tokens)", path_, tokens_.size());
  }

 private:
  std::string path_;
  int T_;
  std::vector<uint16_t> tokens_;
};

}  // namespace

std::unique_ptr<TokenSource> makeTokenSource(const JobSpec& job) {
  if (job.data.source == "tokens")
    return std::make_unique<FileSource>(job.data.path, job.model.vocab, job.model.seq_len);
  return std::make_unique<MarkovSource>(job.model.vocab, job.model.seq_len, job.data.markov_order,
                                        job.data.branching, job.training.seed);
}

void fillMicroBatch(const TokenSource& source, const JobSpec& job, int step, int micro_batch, int rank,
                    int32_t* tokens, int32_t* targets) {
  const int64_t B = job.training.micro_batch, T = job.model.seq_len;
  // The ranks of one sample replica (its tensor- and context-parallel
  // groups in each pipeline stage) share its samples.
  const int64_t replica = job.sampleReplica(rank);
  const int64_t first = int64_t(step) * job.globalBatch() +
                        (int64_t(micro_batch) * job.parallel.data_parallel + replica) * B;
  const int cp = job.parallel.context_parallel;
  if (cp == 1) {
    for (int64_t i = 0; i < B; ++i) source.sample(first + i, tokens + i * T, targets + i * T);
    return;
  }
  // Context parallelism: the rank's two chunks of each sample, in order.
  const int64_t local = job.rankSeqLen();
  const int place = job.contextParallelPlace(rank);
  std::vector<int32_t> whole_tokens(static_cast<size_t>(T)), whole_targets(static_cast<size_t>(T));
  for (int64_t i = 0; i < B; ++i) {
    source.sample(first + i, whole_tokens.data(), whole_targets.data());
    for (int64_t t = 0; t < local; ++t) {
      const int64_t at = contextParallelPosition(t, local, place, cp);
      tokens[i * local + t] = whole_tokens[size_t(at)];
      targets[i * local + t] = whole_targets[size_t(at)];
    }
  }
}

}  // namespace tandem
