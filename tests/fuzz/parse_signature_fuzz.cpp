// The shard_map signature parser on arbitrary text; a signature that parses prints back to text
// that parses to it, and its specs can be taken.
#include <cstdlib>

#include "core/error.h"
#include "nn/signature.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::nn::Signature signature;
  try {
    signature = tessera::nn::parse_signature(tessera::fuzz::as_text(data, size));
  } catch (const tessera::Error&) {
    return 0;
  }
  if (tessera::nn::parse_signature(signature.to_string()) != signature) std::abort();
  try {
    (void)signature.in_specs();
    (void)signature.out_specs();
  } catch (const tessera::Error&) {
  }
  return 0;
}
