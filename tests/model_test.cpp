// The destruction-order model test (docs/testing.md, "Model test").
//
// Random sequences of stream, thread, pool and block operations run against the pool on a
// checking host backend, with a happens-before oracle (tests/model/hb_oracle.hpp) watching every
// backend call. Each seed is one sequence; a failure prints the seed and the operation list.
// tests/model/model_test_body.hpp lists the environment variables (STREAMPOOL_MODEL_SEEDS,
// STREAMPOOL_MODEL_SEED to replay one, ...).
#include "model/model_test_body.hpp"

namespace sm = streampool::model;

TEST(ModelTest, RandomSequences) {
  sm::run_model_test({}, sm::under_tsan ? 150 : sm::under_sanitizer ? 300 : 2000);
}
