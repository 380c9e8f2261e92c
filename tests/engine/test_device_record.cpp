// The device and software record a real run writes into the trace store
// (engine/cuda/device_record.h): version numbers as the libraries report
// them, turned into text, and the JSON a calibration's provenance quotes.
// The record's code has no CUDA in it; it is compiled into this test
// directly so that it runs in builds without the CUDA executor too.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/cuda/device_record.cpp"

using namespace tandem::cuda;

TEST_CASE("library version numbers become their release text", "[device]") {
  CHECK(cudaVersionText(13000) == "13.0");
  CHECK(cudaVersionText(12080) == "12.8");
  CHECK(cudaVersionText(0).empty());
  CHECK(ncclVersionText(22803) == "2.28.3");
  CHECK(ncclVersionText(21903) == "2.19.3");
  CHECK(cublasLtVersionText(130100) == "13.1.0");
  CHECK(cublasLtVersionText(120903) == "12.9.3");
}

TEST_CASE("the device record names the device, driver and library versions", "[device]") {
  DeviceRecord d;
  d.index = 1;
  d.name = "NVIDIA H200";
  d.memory_bytes = 150109880320;
  d.sm_count = 132;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.driver = "580.82.07";
  d.cuda_driver = 13000;
  d.cuda_runtime = 13000;
  d.cublaslt = 130100;
  d.nccl = 22803;
  const auto j = nlohmann::ordered_json::parse(devicesJson(d));
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 1);
  CHECK(j[0]["index"] == 1);
  CHECK(j[0]["name"] == "NVIDIA H200");
  CHECK(j[0]["memory_bytes"] == 150109880320);
  CHECK(j[0]["sm_count"] == 132);
  CHECK(j[0]["compute_capability"] == "9.0");
  CHECK(j[0]["driver"] == "580.82.07");
  CHECK(j[0]["cuda_driver"] == "13.0");
  CHECK(j[0]["cuda_runtime"] == "13.0");
  CHECK(j[0]["cublaslt"] == "13.1.0");
  CHECK(j[0]["nccl"] == "2.28.3");
  // The keys the store had before come first, so older readers still find them.
  CHECK(j[0].begin().key() == "index");

  // What is unknown is left out, not written as zero.
  DeviceRecord bare;
  bare.name = "a \"quoted\" name";
  const auto k = nlohmann::json::parse(devicesJson(bare));
  CHECK(k[0]["name"] == "a \"quoted\" name");
  CHECK(!k[0].contains("driver"));
  CHECK(!k[0].contains("nccl"));
  CHECK(!k[0].contains("compute_capability"));
}
