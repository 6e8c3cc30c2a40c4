/* A GRAPE-6 host program in plain C: 4th-order Hermite with block time steps (Makino &
 * Aarseth 1992), every force through the g6 calls, as codes written for GRAPE-6 do it. The
 * integrator follows gravpipe's own (eta, eta_s, dt_max, power-of-two steps on an integer
 * timeline) so that tests/test_grape6.py can compare the two runs.
 *
 *   hermite_g6 hermite    IC_FILE   integrate to t_end; print energies (float64 on the host)
 *   hermite_g6 forces     IC_FILE   forces at t = 0 and, with predicted j-particles, at t = ti,
 *                                   with nearest neighbours and neighbour lists within h2
 *   hermite_g6 errors               out-of-order calls and bad input: print each return code
 *
 * IC_FILE: "n eps2 eta eta_s dt_max t_end ti h2" on one line, then n lines "m x y z vx vy vz".
 *
 * hermite and forces run with FE_INVALID, FE_DIVBYZERO and FE_OVERFLOW trapped (glibc's
 * feenableexcept, as a Fortran host built with -ffpe-trap does): the library must raise no
 * floating-point exception on valid input, eps2 = 0 included, or the program dies of SIGFPE.
 * The traps are armed before g6_open, so that the library's threads inherit them.
 */
#define _GNU_SOURCE /* feenableexcept */
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gravpipe/g6.h"

#define TICKS_PER_DTMAX ((int64_t)1 << 40)

typedef struct {
  int n;
  double eps2, eta, eta_s, dt_max, t_end, ti, h2;
  double *m, (*x)[3], (*v)[3], (*a)[3], (*j)[3], *pot;
  int64_t *t, *dt;  /* own time and step, in ticks */
} System;

static void *alloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(3);
  }
  return p;
}

static int read_system(const char *path, System *s) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%d %lf %lf %lf %lf %lf %lf %lf", &s->n, &s->eps2, &s->eta, &s->eta_s, &s->dt_max, &s->t_end,
             &s->ti, &s->h2) != 8 || s->n <= 0) {
    fclose(f);
    return 0;
  }
  const size_t n = (size_t)s->n;
  s->m = alloc(n * sizeof *s->m);
  s->x = alloc(n * sizeof *s->x);
  s->v = alloc(n * sizeof *s->v);
  s->a = alloc(n * sizeof *s->a);
  s->j = alloc(n * sizeof *s->j);
  s->pot = alloc(n * sizeof *s->pot);
  s->t = alloc(n * sizeof *s->t);
  s->dt = alloc(n * sizeof *s->dt);
  for (int i = 0; i < s->n; ++i)
    if (fscanf(f, "%lf %lf %lf %lf %lf %lf %lf", &s->m[i], &s->x[i][0], &s->x[i][1], &s->x[i][2], &s->v[i][0],
               &s->v[i][1], &s->v[i][2]) != 7) {
      fclose(f);
      return 0;
    }
  fclose(f);
  return 1;
}

static double norm3(const double v[3]) { return sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]); }
static double tick(const System *s) { return s->dt_max / (double)TICKS_PER_DTMAX; }

/* Send particle i to j-memory address i (index i) with its predictor coefficients. */
static void send_j(const System *s, int i) {
  double a2[3], j6[3], k18[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c) a2[c] = s->a[i][c] / 2, j6[c] = s->j[i][c] / 6;
  if (g6_set_j_particle(0, i, i, (double)s->t[i] * tick(s), (double)s->dt[i] * tick(s), s->m[i], k18, j6, a2,
                        s->v[i], s->x[i]) != GRAVPIPE_G6_OK)
    exit(4);
}

/* Forces on the ni particles list[] at positions xi, vi, in chunks of g6_npipes(). */
static void forces(const System *s, int ni, int *list, double (*xi)[3], double (*vi)[3], double (*acc)[3],
                   double (*jerk)[3], double *pot, double h2_all, int *nn) {
  const int npipes = g6_npipes();
  double *h2 = alloc((size_t)npipes * sizeof *h2);
  double(*dummy)[3] = alloc((size_t)npipes * sizeof *dummy);
  for (int k = 0; k < npipes; ++k) h2[k] = h2_all;
  for (int b = 0; b < ni; b += npipes) {
    const int nb = ni - b < npipes ? ni - b : npipes;
    g6calc_firsthalf(0, s->n, nb, list + b, xi + b, vi + b, dummy, dummy, pot + b, s->eps2, h2);
    const int err = nn ? g6calc_lasthalf2(0, s->n, nb, list + b, xi + b, vi + b, s->eps2, h2, acc + b, jerk + b,
                                          pot + b, nn + b)
                       : g6calc_lasthalf(0, s->n, nb, list + b, xi + b, vi + b, s->eps2, h2, acc + b, jerk + b,
                                         pot + b);
    if (err != GRAVPIPE_G6_OK) {
      fprintf(stderr, "g6calc_lasthalf returned %d\n", err);
      exit(5);
    }
  }
  free(h2);
  free(dummy);
}

/* Largest dt_max / 2^k not above want, at most doubling the old step and only when the new
 * time is a multiple of the doubled step (gravpipe's HermiteIntegrator::quantize). */
static int64_t quantize(const System *s, double want, int64_t old, int64_t t_new) {
  int64_t dt = TICKS_PER_DTMAX;
  while (dt > 1 && (double)dt * tick(s) > want) dt >>= 1;
  if (!((double)dt * tick(s) <= want)) {
    fprintf(stderr, "time step underflow\n");
    exit(6);
  }
  if (old > 0 && dt > old) dt = (t_new % (2 * old) == 0) ? 2 * old : old;
  return dt;
}

/* Host float64 energy: kinetic + softened pairwise potential. */
static double energy(const System *s) {
  double ek = 0, ep = 0;
  for (int i = 0; i < s->n; ++i) {
    ek += 0.5 * s->m[i] * (s->v[i][0] * s->v[i][0] + s->v[i][1] * s->v[i][1] + s->v[i][2] * s->v[i][2]);
    for (int k = i + 1; k < s->n; ++k) {
      const double dx = s->x[k][0] - s->x[i][0], dy = s->x[k][1] - s->x[i][1], dz = s->x[k][2] - s->x[i][2];
      ep -= s->m[i] * s->m[k] / sqrt(dx * dx + dy * dy + dz * dz + s->eps2);
    }
  }
  return ek + ep;
}

static int run_hermite(System *s) {
  const int n = s->n;
  int *all = alloc((size_t)n * sizeof *all), *active = alloc((size_t)n * sizeof *active);
  double(*xp)[3] = alloc((size_t)n * sizeof *xp), (*vp)[3] = alloc((size_t)n * sizeof *vp);
  double(*a1)[3] = alloc((size_t)n * sizeof *a1), (*j1)[3] = alloc((size_t)n * sizeof *j1);
  double *p1 = alloc((size_t)n * sizeof *p1);
  for (int i = 0; i < n; ++i) all[i] = i;

  /* Start: zero coefficients at t = 0, one evaluation on all particles, first steps. */
  g6_set_ti(0, 0.0);
  for (int i = 0; i < n; ++i) send_j(s, i);
  forces(s, n, all, s->x, s->v, s->a, s->j, s->pot, 0.0, NULL);
  for (int i = 0; i < n; ++i) {
    const double aa = norm3(s->a[i]), jj = norm3(s->j[i]);
    s->dt[i] = quantize(s, jj > 0 ? s->eta_s * aa / jj : s->dt_max, 0, 0);
    send_j(s, i);
  }
  const double e0 = energy(s);
  double epot_g6 = 0;
  for (int i = 0; i < n; ++i) epot_g6 += 0.5 * s->m[i] * s->pot[i];

  const int64_t t_stop = (int64_t)llround(s->t_end / s->dt_max) * TICKS_PER_DTMAX;
  int64_t now = 0, blocks = 0, steps = 0;
  while (now < t_stop) {
    int64_t t_block = INT64_MAX;
    for (int i = 0; i < n; ++i)
      if (s->t[i] + s->dt[i] < t_block) t_block = s->t[i] + s->dt[i];
    int na = 0;
    for (int i = 0; i < n; ++i)
      if (s->t[i] + s->dt[i] == t_block) active[na++] = i;
    for (int k = 0; k < na; ++k) {
      const int i = active[k];
      const double dt = (double)(t_block - s->t[i]) * tick(s);
      for (int c = 0; c < 3; ++c) {
        xp[k][c] = s->x[i][c] + dt * (s->v[i][c] + dt * (0.5 * s->a[i][c] + dt * s->j[i][c] / 6.0));
        vp[k][c] = s->v[i][c] + dt * (s->a[i][c] + 0.5 * dt * s->j[i][c]);
      }
    }
    g6_set_ti(0, (double)t_block * tick(s));
    forces(s, na, active, xp, vp, a1, j1, p1, 0.0, NULL);
    for (int k = 0; k < na; ++k) { /* corrector, then Aarseth's step criterion */
      const int i = active[k];
      const double dt = (double)(t_block - s->t[i]) * tick(s), dt2 = dt * dt, dt3 = dt2 * dt;
      double a2[3], a3[3];
      for (int c = 0; c < 3; ++c) {
        const double a0 = s->a[i][c], j0 = s->j[i][c];
        a2[c] = (-6.0 * (a0 - a1[k][c]) - dt * (4.0 * j0 + 2.0 * j1[k][c])) / dt2;
        a3[c] = (12.0 * (a0 - a1[k][c]) + 6.0 * dt * (j0 + j1[k][c])) / dt3;
        s->x[i][c] = xp[k][c] + dt2 * dt2 * (a2[c] / 24.0 + dt * a3[c] / 120.0);
        s->v[i][c] = vp[k][c] + dt3 * (a2[c] / 6.0 + dt * a3[c] / 24.0);
        s->a[i][c] = a1[k][c];
        s->j[i][c] = j1[k][c];
        a2[c] += dt * a3[c];
      }
      s->pot[i] = p1[k];
      const double aa = norm3(a1[k]), jj = norm3(j1[k]), ss = norm3(a2), cc = norm3(a3);
      const double num = aa * ss + jj * jj, den = jj * cc + ss * ss;
      const double want = den > 0 ? sqrt(s->eta * num / den) : s->dt_max;
      s->dt[i] = quantize(s, want, s->dt[i], t_block);
      s->t[i] = t_block;
    }
    for (int k = 0; k < na; ++k) send_j(s, active[k]);
    now = t_block;
    blocks += 1;
    steps += na;
  }
  const double e1 = energy(s);
  printf("N %d\nblocks %lld\nsteps %lld\nE0 %.17g\nE1 %.17g\nEpot0_g6 %.17g\n", n, (long long)blocks,
         (long long)steps, e0, e1, epot_g6);
  for (int i = 0; i < n; ++i)
    printf("X %d %.17g %.17g %.17g %.17g %.17g %.17g\n", i, s->x[i][0], s->x[i][1], s->x[i][2], s->v[i][0],
           s->v[i][1], s->v[i][2]);
  return 0;
}

static int run_forces(System *s) {
  const int n = s->n;
  int *all = alloc((size_t)n * sizeof *all), *nn = alloc((size_t)n * sizeof *nn);
  double(*xp)[3] = alloc((size_t)n * sizeof *xp), (*vp)[3] = alloc((size_t)n * sizeof *vp);
  double(*a1)[3] = alloc((size_t)n * sizeof *a1), (*j1)[3] = alloc((size_t)n * sizeof *j1);
  double *p1 = alloc((size_t)n * sizeof *p1), *r2 = alloc((size_t)n * sizeof *r2);
  for (int i = 0; i < n; ++i) all[i] = i;
  g6_set_ti(0, 0.0);
  for (int i = 0; i < n; ++i) send_j(s, i);
  forces(s, n, all, s->x, s->v, s->a, s->j, s->pot, 0.0, NULL);
  for (int i = 0; i < n; ++i)
    printf("F0 %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", i, s->a[i][0], s->a[i][1], s->a[i][2], s->j[i][0],
           s->j[i][1], s->j[i][2], s->pot[i]);

  /* j-particles with their coefficients at t = 0, evaluated at ti: the library predicts. */
  for (int i = 0; i < n; ++i) send_j(s, i);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) {
      const double dt = s->ti;
      xp[i][c] = s->x[i][c] + dt * (s->v[i][c] + dt * (s->a[i][c] / 2 + dt * s->j[i][c] / 6));
      vp[i][c] = s->v[i][c] + dt * (2 * (s->a[i][c] / 2) + dt * 3 * (s->j[i][c] / 6));
    }
  g6_set_ti(0, s->ti);
  const int npipes = g6_npipes();
  double *h2 = alloc((size_t)npipes * sizeof *h2);
  double(*dummy)[3] = alloc((size_t)npipes * sizeof *dummy);
  int *list = alloc((size_t)n * sizeof *list);
  for (int k = 0; k < npipes; ++k) h2[k] = s->h2;
  for (int b = 0; b < n; b += npipes) {
    const int nb = n - b < npipes ? n - b : npipes;
    g6calc_firsthalf(0, n, nb, all + b, xp + b, vp + b, dummy, dummy, p1 + b, s->eps2, h2);
    if (g6calc_lasthalf2(0, n, nb, all + b, xp + b, vp + b, s->eps2, h2, a1 + b, j1 + b, p1 + b, nn + b) != 0 ||
        gravpipe_g6_get_nearest_r2(0, nb, r2 + b) != 0)
      return 5;
    const int overflow = g6_read_neighbour_list(0);
    for (int k = 0; k < nb; ++k) {
      int len = 0;
      const int status = g6_get_neighbour_list(0, k, n, &len, list);
      printf("F1 %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d %.17g %d %d",
             b + k, xp[b + k][0], xp[b + k][1], xp[b + k][2], vp[b + k][0], vp[b + k][1], vp[b + k][2],
             a1[b + k][0], a1[b + k][1], a1[b + k][2], j1[b + k][0], j1[b + k][1], j1[b + k][2], p1[b + k],
             nn[b + k], r2[b + k], overflow | status, len);
      for (int q = 0; q < len && q < n; ++q) printf(" %d", list[q]);
      printf("\n");
    }
  }
  return 0;
}

#define SHOW(expr) printf("%s = %d\n", #expr, (expr))

/* Every call out of order or with bad input must return an error, print why and not crash. */
static int run_errors(void) {
  double x[3] = {0, 0, 0}, v[3] = {0, 0, 0}, z[3] = {0, 0, 0}, xi[1][3] = {{1, 0, 0}}, vi[1][3] = {{0, 0, 0}};
  double acc[1][3], jerk[1][3], pot[1], h2[1] = {0};
  int idx[1] = {7}, nn[1], len = 0, nbl[4];
  const double nan = NAN;
  SHOW(g6_set_ti(0, 0.0));                                          /* before g6_open */
  SHOW(g6_open(0));
  SHOW(g6_open(0));                                                 /* twice */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot)); /* no firsthalf */
  printf("nan_after_error %d\n", isnan(acc[0][0]) && isnan(pot[0]));
  SHOW(g6_set_j_particle(0, -1, 0, 0, 0, 1, z, z, z, v, x));        /* address < 0 */
  SHOW(g6_set_j_particle(0, 1 << 30, 0, 0, 0, 1, z, z, z, v, x));   /* beyond the j-memory */
  x[1] = nan;
  SHOW(g6_set_j_particle(0, 0, 0, 0, 0, 1, z, z, z, v, x));         /* NaN position */
  x[1] = 0;
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);  /* address 0 is invalid */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  SHOW(g6_set_j_particle(0, 0, 0, 0, 0, 1, z, z, z, v, x));         /* valid now */
  g6calc_firsthalf(0, 2, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);  /* address 1 never written */
  SHOW(g6calc_lasthalf(0, 2, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  xi[0][2] = nan;
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);  /* NaN i-position */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  xi[0][2] = 0;
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, -1.0, h2); /* eps2 < 0 */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  g6calc_firsthalf(0, 1, g6_npipes() + 1, idx, xi, vi, acc, jerk, pot, 0.0, h2); /* ni > npipes */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);
  SHOW(g6calc_lasthalf2(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot, nn)); /* fine: one pair */
  printf("acc_ok %d nn %d pot %.6f\n", fabs(acc[0][0] + 1.0) < 1e-6, nn[0], pot[0]);
  SHOW(g6_get_neighbour_list(0, 0, 4, &len, nbl));                  /* no read first */
  SHOW(g6_read_neighbour_list(0));
  SHOW(g6_get_neighbour_list(0, 5, 4, &len, nbl));                  /* ipipe out of range */
  SHOW(gravpipe_g6_set_precision(0, 7));
  SHOW(g6_close(0));
  SHOW(g6_close(0));                                                /* twice */
  SHOW(g6_set_j_particle(0, 0, 0, 0, 0, 1, z, z, z, v, x));         /* after close */
  SHOW(g6_open(0));                                                 /* 21: again */
  SHOW(g6_set_j_particle(0, 0, 0, 0, 0, 1, z, z, z, v, x));
  SHOW(g6_set_ti(0, nan));                                          /* the next calculation fails */
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  SHOW(g6_set_ti(0, 0.0));
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);  /* a second one: both dropped */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);
  SHOW(g6_set_ti(0, nan));                                          /* between firsthalf and lasthalf */
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot));
  SHOW(g6_set_ti(0, 0.0));
  g6calc_firsthalf(0, 1, 1, idx, xi, vi, acc, jerk, pot, 0.0, h2);
  SHOW(g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, h2, acc, jerk, pot)); /* 30: fine again */
  SHOW(g6_close(0));
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "errors") == 0) return run_errors();
  System s;
  memset(&s, 0, sizeof s);
  if (argc < 3 || !read_system(argv[2], &s)) {
    fprintf(stderr, "usage: hermite_g6 hermite|forces IC_FILE | hermite_g6 errors\n");
    return 2;
  }
#if defined(__GLIBC__)
  feenableexcept(FE_INVALID | FE_DIVBYZERO | FE_OVERFLOW);
#endif
  if (g6_open(0) != GRAVPIPE_G6_OK) return 3;
  g6_set_tunit(51);
  g6_set_xunit(51);
  const int rc = strcmp(argv[1], "hermite") == 0 ? run_hermite(&s) : strcmp(argv[1], "forces") == 0 ? run_forces(&s) : 2;
  g6_close(0);
  return rc;
}
