/* The pattern of Sapporo-era host codes (ph4's grape.cc, for one): the code defines the C
 * g6_* calls itself, as wrappers around the Fortran symbols that Sapporo exported, and opens
 * one cluster id but computes on another (Sapporo ignores ids). Linked against
 * libgravpipe_g6, its wrappers take precedence over the library's C symbols; the library's
 * Fortran symbols must therefore never call the C ones (that recursed forever before).
 * Prints the force of two unit masses at distance 1 on each other. */
#include <stdio.h>

int g6_open_(int *id);
int g6_close_(int *id);
int g6_set_ti_(int *id, double *ti);
int g6_set_j_particle_(int *cluster_id, int *address, int *index, double *tj, double *dtj, double *mass,
                       double k18[3], double j6[3], double a2[3], double v[3], double x[3]);
void g6calc_firsthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3], double vi[][3],
                       double aold[][3], double j6old[][3], double phiold[], double *eps2, double h2[]);
int g6calc_lasthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3], double vi[][3], double *eps2,
                     double h2[], double acc[][3], double jerk[][3], double pot[]);

int g6_open(int id) { return g6_open_(&id); }
int g6_close(int id) { return g6_close_(&id); }
int g6_set_ti(int id, double ti) { return g6_set_ti_(&id, &ti); }
int g6_set_j_particle(int cluster_id, int address, int index, double tj, double dtj, double mass, double k18[3],
                      double j6[3], double a2[3], double v[3], double x[3]) {
  return g6_set_j_particle_(&cluster_id, &address, &index, &tj, &dtj, &mass, k18, j6, a2, v, x);
}
void g6calc_firsthalf(int cluster_id, int nj, int ni, int index[], double xi[][3], double vi[][3],
                      double aold[][3], double j6old[][3], double phiold[], double eps2, double h2[]) {
  g6calc_firsthalf_(&cluster_id, &nj, &ni, index, xi, vi, aold, j6old, phiold, &eps2, h2);
}
int g6calc_lasthalf(int cluster_id, int nj, int ni, int index[], double xi[][3], double vi[][3], double eps2,
                    double h2[], double acc[][3], double jerk[][3], double pot[]) {
  return g6calc_lasthalf_(&cluster_id, &nj, &ni, index, xi, vi, &eps2, h2, acc, jerk, pot);
}

int main(void) {
  double z[3] = {0, 0, 0}, x[2][3] = {{0, 0, 0}, {1, 0, 0}}, v[2][3] = {{0, 0, 0}, {0, 0, 0}};
  double acc[2][3], jerk[2][3], pot[2], h2[2] = {0, 0};
  int index[2] = {10, 11};
  if (g6_open(3) != 0) return 1; /* opens "3", computes on 0, as ph4 does */
  g6_set_ti(0, 0.0);
  for (int a = 0; a < 2; ++a)
    if (g6_set_j_particle(0, a, index[a], 0.0, 0.0, 1.0, z, z, z, v[a], x[a]) != 0) return 2;
  g6calc_firsthalf(0, 2, 2, index, x, v, acc, jerk, pot, 0.0, h2);
  if (g6calc_lasthalf(0, 2, 2, index, x, v, 0.0, h2, acc, jerk, pot) != 0) return 3;
  printf("%.15g %.15g %.15g %.15g\n", acc[0][0], acc[1][0], pot[0], pot[1]);
  return g6_close(0);
}
