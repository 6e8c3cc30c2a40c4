// The C and Fortran entry points of libgravpipe_g6 (declared in gravpipe/g6.h).
//
// Global state, and why: the GRAPE-6 ABI is a set of free C functions whose only handle is
// an integer cluster id, so the library must keep the clusters itself. All of it lives in
// one Registry object (cluster id -> Context) behind one mutex, created on first use; every
// entry point locks it, looks its cluster up and delegates. Nothing else is global.
//
// No exception crosses the C boundary: each entry point catches everything, prints one line
// to stderr ("gravpipe g6: <call>: <why>") and returns GRAVPIPE_G6_ERROR, which GRAPE-6 codes
// treat as a hardware error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "g6_context.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/g6.h"

#define G6_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" int gravpipe_g6_env_set_wait_policy(void);  // libgravpipe_g6_env (g6_env.cpp)

namespace gravpipe::grape6 {
namespace {

// libgravpipe_g6_env set OMP_WAIT_POLICY for libgomp, which has read it by now (it is
// initialized before this library): the host's environment, and its children's, stay its own.
__attribute__((constructor)) void restore_environment() {
  if (gravpipe_g6_env_set_wait_policy() != 0) unsetenv("OMP_WAIT_POLICY");
}

// Cluster ids. GRAPE-6 numbers independent clusters; Sapporo, which most codes of the last
// fifteen years were built against, ignores the id (one device serves them all), and codes
// rely on it: ph4 opens one id and then computes on id 0. So by default every id names the
// same cluster; GRAVPIPE_G6_CLUSTERS=separate (read when the first cluster opens) gives each
// id its own j-memory and pipeline, as on a multi-cluster GRAPE-6.
class Registry {
 public:
  std::mutex mutex;

  Context& open(int id) {
    if (contexts_.empty()) separate_ = read_cluster_mode();
    const int k = key(id);
    if (contexts_.count(k) != 0)
      throw InputError("cluster " + std::to_string(id) + " is already open (g6_close it first" +
                       (separate_ ? ")" : "; every cluster id names the same one unless GRAVPIPE_G6_CLUSTERS=separate)"));
    auto ctx = std::make_unique<Context>(Settings::from_environment());
    return *(contexts_[k] = std::move(ctx));
  }
  void close(int id) {
    if (contexts_.erase(key(id)) == 0) throw InputError("cluster " + std::to_string(id) + " is not open");
  }
  Context& at(int id) {
    const auto it = contexts_.find(key(id));
    if (it == contexts_.end()) throw InputError("cluster " + std::to_string(id) + " is not open (call g6_open first)");
    return *it->second;
  }
  /// g6_npipes takes no cluster: the open clusters' value, else the environment's.
  std::size_t npipes() const {
    return contexts_.empty() ? Settings::from_environment().npipes : contexts_.begin()->second->settings().npipes;
  }

 private:
  int key(int id) const {
    if (id < 0) throw InputError("cluster id " + std::to_string(id) + " is negative");
    return separate_ ? id : 0;
  }
  static bool read_cluster_mode() {
    const char* mode = std::getenv("GRAVPIPE_G6_CLUSTERS");
    if (mode == nullptr || *mode == '\0' || std::string(mode) == "shared") return false;
    if (std::string(mode) == "separate") return true;
    throw InputError(std::string("GRAVPIPE_G6_CLUSTERS='") + mode + "': expected 'shared' or 'separate'");
  }
  bool separate_ = false;
  std::map<int, std::unique_ptr<Context>> contexts_;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Only so many messages: a code that ignores errors and retries must not flood its log.
constexpr int kMaxMessages = 100;

void report(const char* call, const char* why) {
  static int printed = 0;
  if (printed < kMaxMessages) std::fprintf(stderr, "gravpipe g6: %s: %s\n", call, why);
  if (++printed == kMaxMessages) std::fprintf(stderr, "gravpipe g6: further messages suppressed\n");
}

/// Run f under the registry lock; any exception becomes a message and GRAVPIPE_G6_ERROR.
template <class F>
int guarded(const char* call, F&& f) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  try {
    return f(registry());
  } catch (const std::exception& e) {
    report(call, e.what());
  } catch (...) {
    report(call, "unknown error");
  }
  return GRAVPIPE_G6_ERROR;
}

void require(bool ok, const char* what) {
  if (!ok) throw InputError(what);
}

std::size_t count_arg(int n, const char* name) {
  if (n < 0) throw InputError(std::string(name) + " = " + std::to_string(n) + " is negative");
  return static_cast<std::size_t>(n);
}

JParticle j_particle(int index, double tj, double mass, const double* a2by18, const double* a1by6,
                     const double* aby2, const double* v, const double* x) {
  require(a2by18 && a1by6 && aby2 && v && x, "a coefficient, velocity or position pointer is NULL");
  JParticle p;
  p.index = index, p.tj = tj, p.mass = mass;
  for (int c = 0; c < 3; ++c) {
    p.x[c] = x[c], p.v[c] = v[c], p.aby2[c] = aby2[c], p.a1by6[c] = a1by6[c], p.a2by18[c] = a2by18[c];
  }
  return p;
}

void firsthalf_checked(Context& ctx, int nj, int ni, const int* index, const double (*xi)[3], const double (*vi)[3],
                       double eps2, const double* h2);

int firsthalf(int id, int nj, int ni, const int* index, const double (*xi)[3], const double (*vi)[3], double eps2,
              const double* h2) {
  return guarded("g6calc_firsthalf", [&](Registry& r) {
    Context& ctx = r.at(id);
    try {
      firsthalf_checked(ctx, nj, ni, index, xi, vi, eps2, h2);
    } catch (const std::exception& e) {
      ctx.firsthalf_failed(e.what());  // firsthalf returns nothing: lasthalf reports it again
      throw;
    }
    return GRAVPIPE_G6_OK;
  });
}

void firsthalf_checked(Context& ctx, int nj, int ni, const int* index, const double (*xi)[3], const double (*vi)[3],
                       double eps2, const double* h2) {
  IParticles ip;
  ip.nj = count_arg(nj, "nj");
  ip.ni = count_arg(ni, "ni");
  // before reading the caller's arrays: they are sized for at most g6_npipes() particles
  if (ip.ni > ctx.settings().npipes)
    throw InputError("ni = " + std::to_string(ip.ni) + " exceeds g6_npipes() = " + std::to_string(ctx.settings().npipes));
  ip.eps2 = eps2;
  if (ip.ni > 0) require(index && xi && vi && h2, "index, xi, vi or h2 is NULL");
  if (ip.ni > 0) {
    ip.index.assign(index, index + ip.ni);
    ip.x.assign(&xi[0][0], &xi[0][0] + 3 * ip.ni);
    ip.v.assign(&vi[0][0], &vi[0][0] + 3 * ip.ni);
    ip.h2.assign(h2, h2 + ip.ni);
  }
  ctx.firsthalf(std::move(ip));
}

// On error the outputs are NaN (and the neighbour indices -1): some codes ignore the
// status, and a NaN force stops them visibly instead of integrating a wrong one.
void fill_nan(std::size_t n, double (*acc)[3], double (*jerk)[3], double* pot, int* nn) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t k = 0; k < n; ++k) {
    for (int c = 0; c < 3; ++c) {
      if (acc) acc[k][c] = nan;
      if (jerk) jerk[k][c] = nan;
    }
    if (pot) pot[k] = nan;
    if (nn) nn[k] = -1;
  }
}

int lasthalf(const char* call, bool nearest, int id, int nj, int ni, double (*acc)[3], double (*jerk)[3], double* pot,
             int* nn) {
  return guarded(call, [&](Registry& r) {
    // the caller's arrays hold at most g6_npipes() particles: never write beyond that
    const std::size_t n = ni > 0 ? static_cast<std::size_t>(ni) : 0, writable = std::min(n, r.npipes());
    try {
      Context& ctx = r.at(id);
      if (n > 0) require(acc && jerk && pot, "acc, jerk or pot is NULL");
      if (n > 0 && nearest) require(nn != nullptr, "nnbindex is NULL");
      ForceOutput out{{n ? &acc[0][0] : nullptr, 3 * n}, {n ? &jerk[0][0] : nullptr, 3 * n}, {pot, n},
                      {nearest ? nn : nullptr, nearest ? n : 0}};
      ctx.lasthalf(count_arg(nj, "nj"), count_arg(ni, "ni"), out);
    } catch (...) {
      fill_nan(writable, acc, jerk, pot, nearest ? nn : nullptr);
      throw;
    }
    return GRAVPIPE_G6_OK;
  });
}

}  // namespace
}  // namespace gravpipe::grape6

using gravpipe::InputError;
using gravpipe::grape6::guarded;
using gravpipe::grape6::Registry;

// ---- implementations ---------------------------------------------------------------------
// The exported C and Fortran symbols below both call these, never each other: a host code
// may define its own C g6_* wrappers around the Fortran symbols (Sapporo-era codes such as
// ph4 do), and those would win symbol interposition over ours and recurse forever.
namespace {


int api_g6_open(int clusterid) {
  return guarded("g6_open", [&](Registry& r) {
    r.open(clusterid);
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_close(int clusterid) {
  return guarded("g6_close", [&](Registry& r) {
    r.close(clusterid);
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_reset(int clusterid) {
  return guarded("g6_reset", [&](Registry& r) {
    r.at(clusterid).reset();
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_reset_fofpga(int clusterid) {
  return guarded("g6_reset_fofpga", [&](Registry& r) {
    r.at(clusterid);
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_npipes(void) {
  const int n = guarded("g6_npipes", [](Registry& r) { return static_cast<int>(r.npipes()); });
  return n > 0 ? n : 1;  // a code divides by it: never return the error code here
}

int api_g6_set_tunit(int) { return GRAVPIPE_G6_OK; }
int api_g6_set_xunit(int) { return GRAVPIPE_G6_OK; }

int api_g6_set_ti(int clusterid, double ti) {
  return guarded("g6_set_ti", [&](Registry& r) {
    r.at(clusterid).set_ti(ti);
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_set_j_particle(int clusterid, int address, int index, double tj, double /*dtj*/, double mass,
                                const double a2by18[3], const double a1by6[3], const double aby2[3],
                                const double v[3], const double x[3]) {
  return guarded("g6_set_j_particle", [&](Registry& r) {
    gravpipe::grape6::Context& ctx = r.at(clusterid);
    ctx.set_j_particle(address, gravpipe::grape6::j_particle(index, tj, mass, a2by18, a1by6, aby2, v, x));
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_initialize_jp_buffer(int clusterid, int buf_size) {
  return guarded("g6_initialize_jp_buffer", [&](Registry& r) {
    r.at(clusterid);
    if (buf_size < 0) throw InputError("buf_size is negative");
    return GRAVPIPE_G6_OK;
  });
}

int api_g6_flush_jp_buffer(int clusterid) {
  return guarded("g6_flush_jp_buffer", [&](Registry& r) {
    r.at(clusterid);
    return GRAVPIPE_G6_OK;
  });
}

void api_g6calc_firsthalf(int clusterid, int nj, int ni, const int index[], double xi[][3], double vi[][3],
                                double /*aold*/[][3], double /*j6old*/[][3], const double /*phiold*/[],
                                double eps2, const double h2[]) {
  gravpipe::grape6::firsthalf(clusterid, nj, ni, index, xi, vi, eps2, h2);
}

int api_g6calc_lasthalf(int clusterid, int nj, int ni, const int /*index*/[], double /*xi*/[][3],
                              double /*vi*/[][3], double /*eps2*/, const double /*h2*/[], double acc[][3],
                              double jerk[][3], double pot[]) {
  return gravpipe::grape6::lasthalf("g6calc_lasthalf", false, clusterid, nj, ni, acc, jerk, pot, nullptr);
}

int api_g6calc_lasthalf2(int clusterid, int nj, int ni, const int /*index*/[], double /*xi*/[][3],
                               double /*vi*/[][3], double /*eps2*/, const double /*h2*/[], double acc[][3],
                               double jerk[][3], double pot[], int nnbindex[]) {
  return gravpipe::grape6::lasthalf("g6calc_lasthalf2", true, clusterid, nj, ni, acc, jerk, pot, nnbindex);
}

int api_g6_read_neighbour_list(int clusterid) {
  return guarded("g6_read_neighbour_list", [&](Registry& r) { return r.at(clusterid).read_neighbour_list(); });
}

int api_g6_get_neighbour_list(int clusterid, int ipipe, int maxlength, int* nblen, int nbl[]) {
  return guarded("g6_get_neighbour_list", [&](Registry& r) {
    gravpipe::grape6::Context& ctx = r.at(clusterid);
    if (nblen == nullptr || (maxlength > 0 && nbl == nullptr)) throw InputError("nblen or nbl is NULL");
    int len = 0;
    const int status = ctx.get_neighbour_list(ipipe, maxlength, len, {nbl, static_cast<std::size_t>(std::max(maxlength, 0))});
    *nblen = len;
    return status;
  });
}

int api_gravpipe_g6_set_precision(int clusterid, int precision) {
  return guarded("gravpipe_g6_set_precision", [&](Registry& r) {
    gravpipe::grape6::Context& ctx = r.at(clusterid);
    if (precision != GRAVPIPE_G6_MIXED && precision != GRAVPIPE_G6_DOUBLE)
      throw InputError("precision " + std::to_string(precision) + " is neither GRAVPIPE_G6_MIXED (0) nor GRAVPIPE_G6_DOUBLE (1)");
    ctx.set_precision(precision == GRAVPIPE_G6_DOUBLE ? gravpipe::Precision::Double : gravpipe::Precision::Mixed);
    return GRAVPIPE_G6_OK;
  });
}

int api_gravpipe_g6_get_nearest_r2(int clusterid, int ni, double r2[]) {
  return guarded("gravpipe_g6_get_nearest_r2", [&](Registry& r) {
    gravpipe::grape6::Context& ctx = r.at(clusterid);
    const std::size_t n = gravpipe::grape6::count_arg(ni, "ni");
    if (n > 0 && r2 == nullptr) throw InputError("r2 is NULL");
    ctx.nearest_r2(n, {r2, n});
    return GRAVPIPE_G6_OK;
  });
}

}  // namespace

// ---- Fortran interface: the same calls, every argument by reference -----------------------

namespace {
int deref(const int* p) { return p ? *p : std::numeric_limits<int>::min(); }  // NULL -> an id no cluster has
double deref(const double* p) { return p ? *p : std::numeric_limits<double>::quiet_NaN(); }
}  // namespace

G6_EXPORT int g6_open_(const int* clusterid) { return api_g6_open(deref(clusterid)); }
G6_EXPORT int g6_close_(const int* clusterid) { return api_g6_close(deref(clusterid)); }
G6_EXPORT int g6_reset_(const int* clusterid) { return api_g6_reset(deref(clusterid)); }
G6_EXPORT int g6_reset_fofpga_(const int* clusterid) { return api_g6_reset_fofpga(deref(clusterid)); }
G6_EXPORT int g6_npipes_(void) { return api_g6_npipes(); }
G6_EXPORT int g6_set_tunit_(const void*) { return GRAVPIPE_G6_OK; }
G6_EXPORT int g6_set_xunit_(const void*) { return GRAVPIPE_G6_OK; }
G6_EXPORT int g6_set_ti_(const int* clusterid, const double* ti) { return api_g6_set_ti(deref(clusterid), deref(ti)); }

G6_EXPORT int g6_set_j_particle_(const int* clusterid, const int* address, const int* index, const double* tj,
                                 const double* dtj, const double* mass, const double a2by18[3],
                                 const double a1by6[3], const double aby2[3], const double v[3], const double x[3]) {
  return api_g6_set_j_particle(deref(clusterid), deref(address), deref(index), deref(tj), deref(dtj), deref(mass),
                           a2by18, a1by6, aby2, v, x);
}

G6_EXPORT int g6_initialize_jp_buffer_(const int* clusterid, const int* buf_size) {
  return api_g6_initialize_jp_buffer(deref(clusterid), deref(buf_size));
}
G6_EXPORT int g6_flush_jp_buffer_(const int* clusterid) { return api_g6_flush_jp_buffer(deref(clusterid)); }

G6_EXPORT void g6calc_firsthalf_(const int* clusterid, const int* nj, const int* ni, const int index[],
                                 double xi[][3], double vi[][3], double aold[][3], double j6old[][3],
                                 const double phiold[], const double* eps2, const double h2[]) {
  api_g6calc_firsthalf(deref(clusterid), deref(nj), deref(ni), index, xi, vi, aold, j6old, phiold, deref(eps2), h2);
}

G6_EXPORT int g6calc_lasthalf_(const int* clusterid, const int* nj, const int* ni, const int index[],
                               double xi[][3], double vi[][3], const double* eps2, const double h2[],
                               double acc[][3], double jerk[][3], double pot[]) {
  return api_g6calc_lasthalf(deref(clusterid), deref(nj), deref(ni), index, xi, vi, deref(eps2), h2, acc, jerk, pot);
}

G6_EXPORT int g6calc_lasthalf2_(const int* clusterid, const int* nj, const int* ni, const int index[],
                                double xi[][3], double vi[][3], const double* eps2, const double h2[],
                                double acc[][3], double jerk[][3], double pot[], int nnbindex[]) {
  return api_g6calc_lasthalf2(deref(clusterid), deref(nj), deref(ni), index, xi, vi, deref(eps2), h2, acc, jerk, pot,
                          nnbindex);
}

G6_EXPORT int g6_read_neighbour_list_(const int* clusterid) { return api_g6_read_neighbour_list(deref(clusterid)); }

G6_EXPORT int g6_get_neighbour_list_(const int* clusterid, const int* ipipe, const int* maxlength, int* nblen,
                                     int nbl[]) {
  return api_g6_get_neighbour_list(deref(clusterid), deref(ipipe), deref(maxlength), nblen, nbl);
}

G6_EXPORT int gravpipe_g6_set_precision_(const int* clusterid, const int* precision) {
  return api_gravpipe_g6_set_precision(deref(clusterid), deref(precision));
}

G6_EXPORT int gravpipe_g6_get_nearest_r2_(const int* clusterid, const int* ni, double r2[]) {
  return api_gravpipe_g6_get_nearest_r2(deref(clusterid), deref(ni), r2);
}

// ---- C interface ----------------------------------------------------------------------------

G6_EXPORT int g6_open(int clusterid) { return api_g6_open(clusterid); }
G6_EXPORT int g6_close(int clusterid) { return api_g6_close(clusterid); }
G6_EXPORT int g6_reset(int clusterid) { return api_g6_reset(clusterid); }
G6_EXPORT int g6_reset_fofpga(int clusterid) { return api_g6_reset_fofpga(clusterid); }
G6_EXPORT int g6_npipes(void) { return api_g6_npipes(); }
G6_EXPORT int g6_set_tunit(int tunit) { return api_g6_set_tunit(tunit); }
G6_EXPORT int g6_set_xunit(int xunit) { return api_g6_set_xunit(xunit); }
G6_EXPORT int g6_set_ti(int clusterid, double ti) { return api_g6_set_ti(clusterid, ti); }

G6_EXPORT int g6_set_j_particle(int clusterid, int address, int index, double tj, double dtj, double mass,
                                const double a2by18[3], const double a1by6[3], const double aby2[3],
                                const double v[3], const double x[3]) {
  return api_g6_set_j_particle(clusterid, address, index, tj, dtj, mass, a2by18, a1by6, aby2, v, x);
}

G6_EXPORT int g6_initialize_jp_buffer(int clusterid, int buf_size) {
  return api_g6_initialize_jp_buffer(clusterid, buf_size);
}
G6_EXPORT int g6_flush_jp_buffer(int clusterid) { return api_g6_flush_jp_buffer(clusterid); }

G6_EXPORT void g6calc_firsthalf(int clusterid, int nj, int ni, const int index[], double xi[][3], double vi[][3],
                                double aold[][3], double j6old[][3], const double phiold[], double eps2,
                                const double h2[]) {
  api_g6calc_firsthalf(clusterid, nj, ni, index, xi, vi, aold, j6old, phiold, eps2, h2);
}

G6_EXPORT int g6calc_lasthalf(int clusterid, int nj, int ni, const int index[], double xi[][3], double vi[][3],
                              double eps2, const double h2[], double acc[][3], double jerk[][3], double pot[]) {
  return api_g6calc_lasthalf(clusterid, nj, ni, index, xi, vi, eps2, h2, acc, jerk, pot);
}

G6_EXPORT int g6calc_lasthalf2(int clusterid, int nj, int ni, const int index[], double xi[][3], double vi[][3],
                               double eps2, const double h2[], double acc[][3], double jerk[][3], double pot[],
                               int nnbindex[]) {
  return api_g6calc_lasthalf2(clusterid, nj, ni, index, xi, vi, eps2, h2, acc, jerk, pot, nnbindex);
}

G6_EXPORT int g6_read_neighbour_list(int clusterid) { return api_g6_read_neighbour_list(clusterid); }

G6_EXPORT int g6_get_neighbour_list(int clusterid, int ipipe, int maxlength, int* nblen, int nbl[]) {
  return api_g6_get_neighbour_list(clusterid, ipipe, maxlength, nblen, nbl);
}

G6_EXPORT int gravpipe_g6_set_precision(int clusterid, int precision) {
  return api_gravpipe_g6_set_precision(clusterid, precision);
}

G6_EXPORT int gravpipe_g6_get_nearest_r2(int clusterid, int ni, double r2[]) {
  return api_gravpipe_g6_get_nearest_r2(clusterid, ni, r2);
}
