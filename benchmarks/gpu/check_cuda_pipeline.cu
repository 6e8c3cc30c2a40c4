// Correctness and speed of CudaPipeline on a GPU machine, against an independent float64
// direct sum written here. Built and run by benchmarks/gpu/run.sh.
//
//   check_cuda_pipeline [n_check=3000] [n_big=262144] [n_huge=1048576] [seed=random]
//
// 1. Accuracy (relative RMS over particles, as tests/test_pipeline.py measures it): Gaussian
//    and clustered sets (a dense clump and hard pairs), eps 1/64 and 1e-4, shifted by 1e5 for
//    mixed, all particles as i with their own index excluded, then a small i-subset; output
//    arrays poisoned with NaN before every call; the seed changes every run.
// 2. The device predictor: write_j_taylor + predict_j against the host predictor + update_j.
// 3. Speed: interactions/s from compute time (kernels, sort and launches; no transfers) and
//    from the whole call, for i = all at n_big and n_huge, and n_i = 1024 against n_huge.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <random>
#include <vector>

#include "gravpipe/cuda_pipeline.hpp"

using gravpipe::Precision;
using gravpipe::Span;
using gravpipe::cuda::CudaPipeline;

namespace {

struct Set {
  std::vector<double> pos, vel, mass;
  std::size_t n() const { return mass.size(); }
};

Set gaussian(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  Set s;
  s.pos.resize(3 * n), s.vel.resize(3 * n), s.mass.assign(n, 1.0 / n);
  for (std::size_t k = 0; k < 3 * n; ++k) s.pos[k] = g(rng), s.vel[k] = 0.3 * g(rng);
  return s;
}

/// tests/conftest.py's clustered_set: a clump of n/8 100x smaller and four hard pairs.
Set clustered(std::size_t n, std::uint64_t seed) {
  Set s = gaussian(n, seed);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t k = 0; k < n / 8; ++k)
    for (int a = 0; a < 3; ++a) s.pos[3 * k + a] = 0.01 * g(rng) + 0.3;
  const std::size_t k0 = n / 8;
  for (std::size_t k = k0; k < k0 + 4; ++k)
    for (int a = 0; a < 3; ++a) s.pos[3 * k + a] = s.pos[3 * (k + 4) + a] + 1e-3 * g(rng);
  for (auto& m : s.mass) m = u(rng) / n;
  return s;
}

/// float64 direct sum on i-particles `rows` (each excluding itself).
void reference(const Set& s, const std::vector<std::size_t>& rows, double eps2, std::vector<double>& acc,
               std::vector<double>& pot, std::vector<double>& jerk) {
  const std::size_t n = s.n(), ni = rows.size();
  acc.assign(3 * ni, 0), pot.assign(ni, 0), jerk.assign(3 * ni, 0);
#pragma omp parallel for
  for (std::size_t q = 0; q < ni; ++q) {
    const std::size_t i = rows[q];
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      double d[3], v[3], r2 = eps2, rv = 0;
      for (int a = 0; a < 3; ++a) {
        d[a] = s.pos[3 * j + a] - s.pos[3 * i + a], v[a] = s.vel[3 * j + a] - s.vel[3 * i + a];
        r2 += d[a] * d[a], rv += d[a] * v[a];
      }
      const double rinv = 1 / std::sqrt(r2), mr3 = s.mass[j] * rinv * rinv * rinv;
      pot[q] -= s.mass[j] * rinv;
      for (int a = 0; a < 3; ++a) {
        acc[3 * q + a] += mr3 * d[a];
        jerk[3 * q + a] += mr3 * (v[a] - 3 * rv * rinv * rinv * d[a]);
      }
    }
  }
}

/// sqrt(mean_i |x_i - ref_i|^2 / mean_i |ref_i|^2), NaN if any x is NaN (tests' rel_rms).
double rel_rms(const std::vector<double>& x, const std::vector<double>& ref) {
  double dn = 0, rn = 0;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    if (std::isnan(x[k])) return NAN;
    dn += (x[k] - ref[k]) * (x[k] - ref[k]), rn += ref[k] * ref[k];
  }
  return std::sqrt(dn / rn);
}

/// FNV-1a over the bytes of the arrays: equal digests mean bitwise-equal results (builds
/// of different kernel shapes compared on the same seed).
std::uint64_t digest(std::initializer_list<const std::vector<double>*> arrays) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto* v : arrays) {
    const auto* b = reinterpret_cast<const unsigned char*>(v->data());
    for (std::size_t k = 0; k < v->size() * sizeof(double); ++k) h = (h ^ b[k]) * 1099511628211ull;
  }
  return h;
}

int check_case(const char* name, Set s, double eps, double shift, std::size_t stride) {
  for (std::size_t k = 0; k < s.n(); ++k) s.pos[3 * k] += shift, s.pos[3 * k + 1] -= 0.5 * shift;
  std::vector<std::size_t> rows;
  for (std::size_t k = 0; k < s.n(); k += stride) rows.push_back(k);
  const std::size_t ni = rows.size(), n = s.n();
  std::vector<double> ra, rp, rj;
  reference(s, rows, eps * eps, ra, rp, rj);
  std::vector<double> xi(3 * ni), vi(3 * ni);
  std::vector<std::int64_t> ex(ni);
  for (std::size_t q = 0; q < ni; ++q) {
    for (int a = 0; a < 3; ++a) xi[3 * q + a] = s.pos[3 * rows[q] + a], vi[3 * q + a] = s.vel[3 * rows[q] + a];
    ex[q] = static_cast<std::int64_t>(rows[q]);
  }
  int failures = 0;
  for (Precision p : {Precision::Mixed, Precision::Double}) {
    if (p == Precision::Double && shift != 0) continue;
    CudaPipeline pipe(p, eps, 1.0);
    pipe.set_j({s.pos.data(), 3 * n}, {s.mass.data(), n}, {s.vel.data(), 3 * n});
    std::vector<double> acc(3 * ni, NAN), pot(ni, NAN), jerk(3 * ni, NAN);
    pipe.forces({{xi.data(), 3 * ni}, {vi.data(), 3 * ni}, {ex.data(), ni}, {acc.data(), 3 * ni}, {pot.data(), ni},
                 {jerk.data(), 3 * ni}});
    std::vector<double> acc2(3 * ni, NAN), pot2(ni, NAN);  // acc + pot kernel
    pipe.forces({{xi.data(), 3 * ni}, {}, {ex.data(), ni}, {acc2.data(), 3 * ni}, {pot2.data(), ni}, {}});
    const double ea = rel_rms(acc, ra), ep = rel_rms(pot, rp), ej = rel_rms(jerk, rj);
    const double ea2 = rel_rms(acc2, ra), ep2 = rel_rms(pot2, rp);
    const double b = p == Precision::Mixed ? 1e-6 : 1e-12, bj = p == Precision::Mixed ? 1e-5 : 1e-12;
    const bool ok = ea <= b && ep <= b && ej <= bj && ea2 <= b && ep2 <= b;
    failures += !ok;
    const auto st = pipe.stats();
    std::printf("accuracy %-6s %-22s N=%6zu n_i=%6zu: acc %.2e pot %.2e jerk %.2e | acc+pot kernel: acc %.2e pot %.2e"
                " | far tiles %.0f%% | digest %016llx  %s\n",
                p == Precision::Mixed ? "mixed" : "double", name, n, ni, ea, ep, ej, ea2, ep2,
                st.tile_visits ? 100.0 * st.far_tile_visits / st.tile_visits : 0.0,
                static_cast<unsigned long long>(digest({&acc, &pot, &jerk, &acc2, &pot2})), ok ? "ok" : "FAIL");
  }
  return failures;
}

/// Device predictor vs host predictor + update_j: forces must agree to float64 rounding.
int check_predictor(std::uint64_t seed) {
  const std::size_t n = 4096;
  const Set s = gaussian(n, seed);
  std::mt19937_64 rng(seed + 7);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> a(3 * n), j(3 * n), xp(3 * n), vp(3 * n);
  std::vector<std::int64_t> idx(n), t(n);
  const double tick = 1.0 / 1024;
  const std::int64_t now = 640;
  for (std::size_t k = 0; k < n; ++k) {
    idx[k] = static_cast<std::int64_t>(k), t[k] = now - static_cast<std::int64_t>(rng() % 64);
    for (int c = 0; c < 3; ++c) a[3 * k + c] = g(rng), j[3 * k + c] = g(rng);
  }
  for (std::size_t k = 0; k < n; ++k) {
    const double dt = static_cast<double>(now - t[k]) * tick;
    for (int c = 0; c < 3; ++c) {
      const std::size_t q = 3 * k + c;
      xp[q] = s.pos[q] + dt * (s.vel[q] + dt * (0.5 * a[q] + dt * j[q] / 6.0));
      vp[q] = s.vel[q] + dt * (a[q] + 0.5 * dt * j[q]);
    }
  }
  std::vector<double> acc1(3 * n), pot1(n), jr1(3 * n), acc2(3 * n), pot2(n), jr2(3 * n);
  CudaPipeline host(Precision::Double, 0.01, 1.0), dev(Precision::Double, 0.01, 1.0);
  host.set_j({s.pos.data(), 3 * n}, {s.mass.data(), n}, {s.vel.data(), 3 * n});
  host.update_j({xp.data(), 3 * n}, {vp.data(), 3 * n});
  host.forces({{xp.data(), 3 * n}, {vp.data(), 3 * n}, {idx.data(), n}, {acc1.data(), 3 * n}, {pot1.data(), n},
               {jr1.data(), 3 * n}});
  dev.set_j({s.pos.data(), 3 * n}, {s.mass.data(), n}, {s.vel.data(), 3 * n});
  dev.write_j_taylor({{idx.data(), n}, {s.pos.data(), 3 * n}, {s.vel.data(), 3 * n}, {a.data(), 3 * n},
                      {j.data(), 3 * n}, {t.data(), n}});
  dev.predict_j(now, tick);
  dev.forces({{xp.data(), 3 * n}, {vp.data(), 3 * n}, {idx.data(), n}, {acc2.data(), 3 * n}, {pot2.data(), n},
              {jr2.data(), 3 * n}});
  const double ea = rel_rms(acc2, acc1), ej = rel_rms(jr2, jr1);
  const bool ok = ea < 1e-13 && ej < 1e-12;
  std::printf("predictor on the device vs host predictor: acc %.2e jerk %.2e  %s\n", ea, ej, ok ? "ok" : "FAIL");
  return !ok;
}

void speed(const Set& s, std::size_t n_i, Precision p, bool jerk) {
  const std::size_t n = s.n();
  CudaPipeline pipe(p, 1.0 / 64, 1.0);
  pipe.set_j({s.pos.data(), 3 * n}, {s.mass.data(), n}, {s.vel.data(), 3 * n});
  std::vector<double> acc(3 * n_i), pot(n_i), jrk(3 * n_i);
  std::vector<std::int64_t> ex(n_i);
  for (std::size_t k = 0; k < n_i; ++k) ex[k] = static_cast<std::int64_t>(k);
  const gravpipe::ForceRequest req{{s.pos.data(), 3 * n_i},
                                   jerk ? Span<const double>{s.vel.data(), 3 * n_i} : Span<const double>{},
                                   {ex.data(), n_i},
                                   {acc.data(), 3 * n_i},
                                   {pot.data(), n_i},
                                   jerk ? Span<double>{jrk.data(), 3 * n_i} : Span<double>{}};
  pipe.forces(req);  // warm-up
  const int reps = static_cast<double>(n_i) * n > 1e10 ? 3 : 20;
  double best_compute = 1e30, best_wall = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = pipe.stats().seconds_compute;
    const auto t0 = std::chrono::steady_clock::now();
    pipe.forces(req);
    best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_compute = std::min(best_compute, pipe.stats().seconds_compute - c0);
  }
  const auto st = pipe.stats();
  const double inter = static_cast<double>(n) * n_i;
  std::printf("speed %-6s %-12s N_j=%8zu n_i=%8zu: %.3e interactions/s compute (%.3e whole call; %.3f ms) far %.0f%%"
              " | digest %016llx\n",
              p == Precision::Mixed ? "mixed" : "double", jerk ? "acc+jerk+pot" : "acc+pot", n, n_i,
              inter / best_compute, inter / best_wall, 1e3 * best_wall,
              st.tile_visits ? 100.0 * st.far_tile_visits / st.tile_visits : 0.0,
              static_cast<unsigned long long>(digest({&acc, &pot, &jrk})));
}

}  // namespace

int main(int argc, char** argv) try {
  const std::size_t n_check = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 3000;
  const std::size_t n_big = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 262144;
  const std::size_t n_huge = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1048576;
  const std::uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  int failures = 0;
  failures += check_case("gaussian eps=1/64", gaussian(n_check, seed), 1.0 / 64, 0, 1);
  failures += check_case("clustered eps=1e-4", clustered(n_check, seed), 1e-4, 0, 1);
  failures += check_case("clustered eps=0", clustered(n_check, seed), 0.0, 0, 1);
  failures += check_case("clustered shift 1e5", clustered(n_check, seed), 1e-4, 1e5, 1);
  failures += check_case("clustered i-subset", clustered(n_check, seed), 1e-4, 0, 37);
  failures += check_case("gaussian N=300k sub", gaussian(300000, seed), 1.0 / 64, 0, 1501);
  failures += check_predictor(seed);
  const Set big = gaussian(n_big, 2), huge = gaussian(n_huge, 3);
  for (bool jerk : {false, true})
    for (Precision p : {Precision::Mixed, Precision::Double}) {
      speed(big, n_big, p, jerk);
      if (p == Precision::Mixed) speed(huge, n_huge, p, jerk);
      speed(huge, 1024, p, jerk);
    }
  std::printf("%s\n", failures == 0 ? "ALL CHECKS PASSED" : "CHECKS FAILED");
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "check_cuda_pipeline: %s\n", e.what());
  return 2;
}
