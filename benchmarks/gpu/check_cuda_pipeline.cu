// Correctness and speed of CudaPipeline on a GPU machine (issue 5), against an
// independent float64 direct sum written here. Built and run by benchmarks/gpu/run.sh.
// STATUS: compiled, never run (no GPU lent so far).
//
//   check_cuda_pipeline [n_check=4096] [n_big=262144]
//
// 1. Accuracy: N = n_check random Plummer-like points, all particles as i (own index
//    excluded): max relative error of acc, pot, jerk against float64, both precisions.
// 2. Speed: acc+pot and acc+jerk+pot, mixed and double, N = n_big (i = j = all), and the
//    small-i case n_i = 1024 against N_j = n_big: interactions per second (best of 3).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

#include "gravpipe/cuda_pipeline.hpp"

using gravpipe::Precision;
using gravpipe::Span;
using gravpipe::cuda::CudaPipeline;

namespace {

struct Set {
  std::vector<double> pos, vel, mass;
};

Set make_set(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  Set s;
  s.pos.resize(3 * n), s.vel.resize(3 * n), s.mass.assign(n, 1.0 / n);
  for (std::size_t k = 0; k < 3 * n; ++k) s.pos[k] = g(rng), s.vel[k] = 0.3 * g(rng);
  return s;
}

/// float64 direct sum with self excluded: acc, pot, jerk on the first n_i particles.
void reference(const Set& s, std::size_t n_i, double eps2, std::vector<double>& acc, std::vector<double>& pot,
               std::vector<double>& jerk) {
  const std::size_t n = s.mass.size();
  acc.assign(3 * n_i, 0), pot.assign(n_i, 0), jerk.assign(3 * n_i, 0);
  for (std::size_t i = 0; i < n_i; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      double d[3], v[3], r2 = eps2, rv = 0;
      for (int a = 0; a < 3; ++a) {
        d[a] = s.pos[3 * j + a] - s.pos[3 * i + a], v[a] = s.vel[3 * j + a] - s.vel[3 * i + a];
        r2 += d[a] * d[a], rv += d[a] * v[a];
      }
      const double rinv = 1 / std::sqrt(r2), mr3 = s.mass[j] * rinv * rinv * rinv;
      pot[i] -= s.mass[j] * rinv;
      for (int a = 0; a < 3; ++a) {
        acc[3 * i + a] += mr3 * d[a];
        jerk[3 * i + a] += mr3 * (v[a] - 3 * rv * rinv * rinv * d[a]);
      }
    }
}

double max_rel(const std::vector<double>& x, const std::vector<double>& ref, int width) {
  double worst = 0;
  for (std::size_t i = 0; i < ref.size() / width; ++i) {
    double dn = 0, rn = 0;
    for (int a = 0; a < width; ++a) {
      const double e = x[width * i + a] - ref[width * i + a];
      dn += e * e, rn += ref[width * i + a] * ref[width * i + a];
    }
    worst = std::max(worst, std::sqrt(dn / rn));
  }
  return worst;
}

int check_accuracy(std::size_t n) {
  const double eps = 1.0 / 64;
  const Set s = make_set(n, 1);
  std::vector<double> ra, rp, rj;
  reference(s, n, eps * eps, ra, rp, rj);
  std::vector<std::int64_t> ex(n);
  for (std::size_t k = 0; k < n; ++k) ex[k] = static_cast<std::int64_t>(k);
  int failures = 0;
  for (Precision p : {Precision::Mixed, Precision::Double}) {
    CudaPipeline pipe(p, eps, 1.0);
    pipe.set_j({s.pos.data(), s.pos.size()}, {s.mass.data(), n}, {s.vel.data(), s.vel.size()});
    std::vector<double> acc(3 * n), pot(n), jerk(3 * n);
    gravpipe::ForceRequest req{{s.pos.data(), 3 * n}, {s.vel.data(), 3 * n}, {ex.data(), n},
                               {acc.data(), 3 * n}, {pot.data(), n}, {jerk.data(), 3 * n}};
    pipe.forces(req);
    const double ea = max_rel(acc, ra, 3), ep = max_rel(pot, rp, 1), ej = max_rel(jerk, rj, 3);
    // the CPU backend's bounds (tests/test_pipeline.py): mixed ~1e-6, double ~1e-13
    const double bound = p == Precision::Mixed ? 2e-6 : 1e-12;
    const bool ok = ea < bound && ep < bound && ej < 10 * bound;
    failures += !ok;
    std::printf("accuracy %-6s N=%zu: max rel err acc %.2e pot %.2e jerk %.2e  %s\n",
                p == Precision::Mixed ? "mixed" : "double", n, ea, ep, ej, ok ? "ok" : "FAIL");
  }
  return failures;
}

void speed(std::size_t n, std::size_t n_i, Precision p, bool jerk) {
  const Set s = make_set(n, 2);
  CudaPipeline pipe(p, 1.0 / 64, 1.0);
  pipe.set_j({s.pos.data(), 3 * n}, {s.mass.data(), n}, {s.vel.data(), 3 * n});
  std::vector<double> acc(3 * n_i), pot(n_i), jrk(3 * n_i);
  gravpipe::ForceRequest req{{s.pos.data(), 3 * n_i}, jerk ? Span<const double>{s.vel.data(), 3 * n_i} : Span<const double>{},
                             {}, {acc.data(), 3 * n_i}, {pot.data(), n_i},
                             jerk ? Span<double>{jrk.data(), 3 * n_i} : Span<double>{}};
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pipe.forces(req);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto st = pipe.stats();
  std::printf("speed %-6s %-12s N_j=%8zu n_i=%8zu: %.3e interactions/s (wall %.4f s; compute share %.0f%%)\n",
              p == Precision::Mixed ? "mixed" : "double", jerk ? "acc+jerk+pot" : "acc+pot", n, n_i,
              static_cast<double>(n) * n_i / best, best,
              100 * st.seconds_compute / (st.seconds_compute + st.seconds_i_write + st.seconds_result_read));
}

}  // namespace

int main(int argc, char** argv) try {
  const std::size_t n_check = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  const std::size_t n_big = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 262144;
  const int failures = check_accuracy(n_check);
  for (Precision p : {Precision::Mixed, Precision::Double})
    for (bool jerk : {false, true}) {
      speed(n_big, n_big, p, jerk);
      speed(n_big, 1024, p, jerk);
    }
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "check_cuda_pipeline: %s\n", e.what());
  return 2;
}
