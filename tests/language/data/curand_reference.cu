// The numbers cuRAND's device API draws, computed on the host by the vendor's own code
// (curand_kernel.h with its host paths: built with nvcc, run without a GPU).
// usage: curand_reference SEED SUBSEQUENCE OFFSET COUNT KIND
//   KIND: u32 (curand), f32 (curand_uniform), f64 (curand_uniform_double),
//         n32 (curand_normal), n64 (curand_normal_double); one value a line
#define QUALIFIERS static inline __host__ __device__
#include <curand_kernel.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char **argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SEED SUBSEQUENCE OFFSET COUNT KIND\n", argv[0]);
    return 2;
  }
  curandStatePhilox4_32_10_t state;
  curand_init(std::strtoull(argv[1], nullptr, 0), std::strtoull(argv[2], nullptr, 0),
              std::strtoull(argv[3], nullptr, 0), &state);
  const char *kind = argv[5];
  for (int i = 0, n = std::atoi(argv[4]); i < n; ++i) {
    if (!std::strcmp(kind, "u32")) std::printf("%u\n", curand(&state));
    else if (!std::strcmp(kind, "f32")) std::printf("%a\n", (double)curand_uniform(&state));
    else if (!std::strcmp(kind, "f64")) std::printf("%a\n", curand_uniform_double(&state));
    else if (!std::strcmp(kind, "n32")) std::printf("%a\n", (double)curand_normal(&state));
    else if (!std::strcmp(kind, "n64")) std::printf("%a\n", curand_normal_double(&state));
    else return 2;
  }
  return 0;
}
