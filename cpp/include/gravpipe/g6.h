/* gravpipe/g6.h: the GRAPE-6 host library interface over gravpipe's force pipeline.
 *
 * Legacy direct N-body codes written for GRAPE-6 (and for Sapporo, its GPU reimplementation)
 * compute their forces through these calls; linking them against libgravpipe_g6 instead of
 * the GRAPE-6 or Sapporo library runs the same code on gravpipe's CPU pipeline, unchanged.
 * Link flags: `gravpipe config --cflags --libs` (or pkg-config gravpipe_g6).
 *
 * What is computed (GRAPE-6 user's guide, section 3), for every i-particle of a call, over
 * the j-particles at addresses [0, nj) predicted to the time set by g6_set_ti:
 *   acc_i  =  sum_j m_j r_ij / (r_ij^2 + eps2)^(3/2)
 *   jerk_i =  sum_j m_j [v_ij / (r_ij^2 + eps2)^(3/2) - 3 (r_ij.v_ij) r_ij / (r_ij^2 + eps2)^(5/2)]
 *   pot_i  = -sum_j m_j / (r_ij^2 + eps2)^(1/2)        (negative, as GRAPE-6 and Sapporo return it)
 * with r_ij = x_j(ti) - x_i, v_ij = v_j(ti) - v_i and G = 1. A pair is skipped when the
 * j-particle's index equals the i-particle's index (no self-interaction), as in the hardware.
 *
 * j-prediction (on the library side, as GRAPE-6 did), dt = ti - tj:
 *   x_j(ti) = x + dt (v + dt (aby2 + dt (a1by6 + dt (3/4) a2by18)))
 *   v_j(ti) = v + dt (2 aby2 + dt (3 a1by6 + dt 3 a2by18))
 * i.e. a Taylor series in which aby2 = a/2, a1by6 = jerk/6 and a2by18 = snap/18.
 *
 * Neighbours (distance without softening, self excluded, as GRAPE-6 and Sapporo):
 *   g6calc_lasthalf2 returns the index of the nearest j-particle of each i-particle;
 *   after any lasthalf, every i-particle with h2 > 0 has the list of the indices of the
 *   j-particles with r_ij^2 < h2, read by g6_read_neighbour_list and g6_get_neighbour_list.
 *
 * Return values: GRAVPIPE_G6_OK (0) on success; GRAVPIPE_G6_ERROR (-1) for a call out of
 * order, an argument out of range or non-finite input (a one-line message goes to stderr;
 * g6calc_lasthalf* then fill their outputs with NaN, since some codes ignore the status);
 * GRAVPIPE_G6_OVERFLOW (1) from the neighbour-list calls when a list did not fit. GRAPE-6
 * documents a non-zero g6calc_lasthalf return as "reset and send the particles again".
 * g6calc_firsthalf returns nothing (as on GRAPE-6): its errors are reported by the
 * g6calc_lasthalf* call that follows.
 *
 * Environment (read by g6_open):
 *   GRAVPIPE_G6_PRECISION   mixed (default: float32 inner arithmetic, relative RMS error of
 *                           acc/pot <= 1e-6, jerk <= 1e-5) or double (float64, <= 1e-12)
 *   GRAVPIPE_G6_NPIPES      i-particles per call, returned by g6_npipes (default 256)
 *   GRAVPIPE_G6_JMEM        j-memory size in particles (default 1048576); an address at or
 *                           beyond it is an error, as on the hardware
 *   GRAVPIPE_G6_NB_MAX      longest neighbour list kept per i-particle (default 8192)
 *   GRAVPIPE_G6_CLUSTERS    shared (default: every cluster id names one cluster, as in Sapporo,
 *                           which codes such as ph4 rely on) or separate (one j-memory and
 *                           pipeline per id, as on a multi-cluster GRAPE-6)
 *   OMP_NUM_THREADS         CPU threads of the force pipeline
 *
 * Fortran: every call also exists with a trailing underscore and all arguments by reference
 * (g6_open_(&id), ...), the GRAPE-6 Fortran convention that gfortran and ifort follow.
 */
#ifndef GRAVPIPE_G6_H
#define GRAVPIPE_G6_H

#ifdef __cplusplus
extern "C" {
#endif

#define GRAVPIPE_G6_OK 0
#define GRAVPIPE_G6_ERROR (-1)
#define GRAVPIPE_G6_OVERFLOW 1

#define GRAVPIPE_G6_MIXED 0
#define GRAVPIPE_G6_DOUBLE 1

/* Initialisation. clusterid >= 0 (see GRAVPIPE_G6_CLUSTERS). */
int g6_open(int clusterid);
int g6_close(int clusterid);
int g6_reset(int clusterid);        /* forget every j-particle, keep the cluster open */
int g6_reset_fofpga(int clusterid); /* accepted, does nothing (no FPGA to reset) */
int g6_npipes(void);                /* i-particles one g6calc_firsthalf may send */
int g6_set_tunit(int tunit);        /* accepted and ignored: no fixed-point scaling here */
int g6_set_xunit(int xunit);        /* accepted and ignored */

/* j-particles and time. */
int g6_set_ti(int clusterid, double ti);
int g6_set_j_particle(int clusterid, int address, int index, double tj, double dtj, double mass,
                      const double a2by18[3], const double a1by6[3], const double aby2[3],
                      const double v[3], const double x[3]);
int g6_initialize_jp_buffer(int clusterid, int buf_size); /* accepted: j-writes are immediate */
int g6_flush_jp_buffer(int clusterid);

/* Forces on ni <= g6_npipes() i-particles from the j-particles at addresses [0, nj). */
void g6calc_firsthalf(int clusterid, int nj, int ni, const int index[], double xi[][3],
                      double vi[][3], double aold[][3], double j6old[][3], const double phiold[],
                      double eps2, const double h2[]);
int g6calc_lasthalf(int clusterid, int nj, int ni, const int index[], double xi[][3],
                    double vi[][3], double eps2, const double h2[], double acc[][3],
                    double jerk[][3], double pot[]);
int g6calc_lasthalf2(int clusterid, int nj, int ni, const int index[], double xi[][3],
                     double vi[][3], double eps2, const double h2[], double acc[][3],
                     double jerk[][3], double pot[], int nnbindex[]);

/* Neighbour lists of the last calculation: read once, then get one list per i-particle
 * (ipipe = its position in the call). Lists hold indices, sorted ascending; *nblen is the
 * number written to nbl (<= maxlength). Both return GRAVPIPE_G6_OVERFLOW when a list was
 * longer than GRAVPIPE_G6_NB_MAX (read) or than maxlength (get): the list is incomplete. */
int g6_read_neighbour_list(int clusterid);
int g6_get_neighbour_list(int clusterid, int ipipe, int maxlength, int* nblen, int nbl[]);

/* gravpipe extensions. */
int gravpipe_g6_set_precision(int clusterid, int precision); /* GRAVPIPE_G6_MIXED or _DOUBLE */
/* Squared distance to the nearest neighbour of each i-particle of the last lasthalf2 call. */
int gravpipe_g6_get_nearest_r2(int clusterid, int ni, double r2[]);

/* Fortran interface: the same calls, arguments by reference. */
int g6_open_(const int* clusterid);
int g6_close_(const int* clusterid);
int g6_reset_(const int* clusterid);
int g6_reset_fofpga_(const int* clusterid);
int g6_npipes_(void);
int g6_set_tunit_(const void* tunit);
int g6_set_xunit_(const void* xunit);
int g6_set_ti_(const int* clusterid, const double* ti);
int g6_set_j_particle_(const int* clusterid, const int* address, const int* index, const double* tj,
                       const double* dtj, const double* mass, const double a2by18[3],
                       const double a1by6[3], const double aby2[3], const double v[3],
                       const double x[3]);
int g6_initialize_jp_buffer_(const int* clusterid, const int* buf_size);
int g6_flush_jp_buffer_(const int* clusterid);
void g6calc_firsthalf_(const int* clusterid, const int* nj, const int* ni, const int index[],
                       double xi[][3], double vi[][3], double aold[][3], double j6old[][3],
                       const double phiold[], const double* eps2, const double h2[]);
int g6calc_lasthalf_(const int* clusterid, const int* nj, const int* ni, const int index[],
                     double xi[][3], double vi[][3], const double* eps2, const double h2[],
                     double acc[][3], double jerk[][3], double pot[]);
int g6calc_lasthalf2_(const int* clusterid, const int* nj, const int* ni, const int index[],
                      double xi[][3], double vi[][3], const double* eps2, const double h2[],
                      double acc[][3], double jerk[][3], double pot[], int nnbindex[]);
int g6_read_neighbour_list_(const int* clusterid);
int g6_get_neighbour_list_(const int* clusterid, const int* ipipe, const int* maxlength, int* nblen,
                           int nbl[]);
int gravpipe_g6_set_precision_(const int* clusterid, const int* precision);
int gravpipe_g6_get_nearest_r2_(const int* clusterid, const int* ni, double r2[]);

#ifdef __cplusplus
}
#endif

#endif /* GRAVPIPE_G6_H */
