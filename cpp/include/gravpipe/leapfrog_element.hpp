// The leapfrog's arithmetic on one element (one component of one particle), written once:
// the in-core step (leapfrog.cpp), the out-of-core passes (paged_kick.cpp), the
// kick-drift inside the external sort (store_sort.cpp) and the closing kick's prediction of
// the next positions must give the same bits, so they all call these.
#pragma once

namespace gravpipe {

/// The kick: v + h a (h = dt / 2).
inline double kicked(double v, double a, double h) { return v + h * a; }

/// The drift: x + dt v.
inline double drifted(double x, double v, double dt) { return x + dt * v; }

}  // namespace gravpipe
