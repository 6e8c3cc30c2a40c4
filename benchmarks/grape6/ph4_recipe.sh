#!/usr/bin/env bash
# Build Steve McMillan's ph4 (parallel 4th-order Hermite, from AMUSE) unchanged, twice:
#   ph4_g6   : its GRAPE/GPU build (-DGPU, calls g6_open, g6_set_j_particle, g6calc_firsthalf,
#              g6calc_lasthalf(2), g6_npipes ...) linked against gravpipe's libgravpipe_g6
#   ph4_cpu  : its own CPU build (no -DGPU): ph4's own double-precision force loop
#              (linked like Makefile.ph4 links it, g6 library included, but never calling it)
# and run both on ph4's own Plummer example files (plummer1k.in ... plummer16k.in).
#
# ph4's sources are not in this repository. They come from the AMUSE repository:
#   https://github.com/amusecode/amuse  commit 8dd292c0a8230dcbd599bbfdfd378dab68c249bf
#   (src/amuse_ph4/src: ph4 itself; lib/stopcond: AMUSE's stopping-condition library it links)
# Give a clone (or bare git dir) of it as AMUSE_GIT; only those two folders are exported.
#
# Needs: an MPI C++ compiler (ph4's standalone main calls MPI_Init; Debian: libopenmpi-dev
# openmpi-bin), gcc, an installed gravpipe (pip install .).
#
# Usage: AMUSE_GIT=/path/to/amuse[.git] bash benchmarks/grape6/ph4_recipe.sh [WORKDIR]
# then:  WORKDIR/ph4_g6 -f WORKDIR/src/plummer4k.in -t 1 -d 1 -e 0.01 -a 0.14   (see bench_ph4.sh)
set -euo pipefail

AMUSE_COMMIT=${AMUSE_COMMIT:-8dd292c0a8230dcbd599bbfdfd378dab68c249bf}
: "${AMUSE_GIT:?set AMUSE_GIT to a clone of https://github.com/amusecode/amuse}"
WORK=${1:-${TMPDIR:-/tmp}/gravpipe_ph4}
AMUSE_GIT=$(cd "$AMUSE_GIT" && pwd)
PYTHON=${PYTHON:-python3}
MPICXX=${MPICXX:-mpicxx}
MPICC=${MPICC:-mpicc}

mkdir -p "$WORK"
cd "$WORK"
rm -rf src stopcond
mkdir -p src stopcond
# (a partial mirror may lack unrelated large blobs: git says so on stderr; the check below counts)
git -C "$AMUSE_GIT" archive "$AMUSE_COMMIT" src/amuse_ph4/src 2>/dev/null | tar -x --strip-components=3 -C src
git -C "$AMUSE_GIT" archive "$AMUSE_COMMIT" lib/stopcond 2>/dev/null | tar -x --strip-components=2 -C stopcond
for f in src/parallel_hermite_4.cc src/gpu.cc src/grape.h src/plummer4k.in stopcond/stopcond.c; do
  [ -s "$f" ] || { echo "missing $f in $AMUSE_GIT at $AMUSE_COMMIT" >&2; exit 1; }
done

G6_LIBS=$("$PYTHON" -m gravpipe.cli config --libs)
OPT="-O3 -g -w"   # ph4's own Makefile uses -O4 -g -Wall; -w: its warnings are not ours to show

# AMUSE's stopping-condition library, MPI flavour (what ph4's Makefile.ph4 links).
"$MPICC" $OPT -DMPILIB -c stopcond/stopcond.c -o stopcond/stopcond.o -Istopcond

# ph4 objects, as Makefile.ph4 builds them (its OBJS and EXTRAOBJS), twice: with -DGPU and without.
OBJS="jdata idata scheduler grape gpu util diag debug close_encounter two_body"
cd src
for o in $OBJS; do
  "$MPICXX" $OPT -I../stopcond -DGPU -c $o.cc -o $o.gpuo
  "$MPICXX" $OPT -I../stopcond -c $o.cc -o $o.o
done
"$MPICXX" $OPT -I../stopcond -c kepler.cc -o kepler-lib.o
"$MPICXX" $OPT -I../stopcond -c hdyn.cc -o hdyn.o
"$MPICXX" $OPT -I../stopcond -c smallN.cc -o smallN-lib.o
"$MPICXX" $OPT -I../stopcond -c smallN_unpert.cc -o smallN_unpert.o
"$MPICXX" $OPT -I../stopcond -c analyze.cc -o analyze-lib.o
"$MPICC" $OPT -c nstab.c -o nstab.co
"$MPICC" $OPT -c f2c.c -o f2c.co
EXTRA="kepler-lib.o hdyn.o smallN-lib.o smallN_unpert.o analyze-lib.o nstab.co f2c.co"
"$MPICXX" $OPT -I../stopcond -DGPU parallel_hermite_4.cc $(for o in $OBJS; do echo $o.gpuo; done) $EXTRA \
    ../stopcond/stopcond.o $G6_LIBS -o ../ph4_g6
# Makefile.ph4 links the no-GPU build against the g6 library too (grape.cc wraps the calls);
# without -DGPU ph4 never calls them and computes every force in its own loop.
"$MPICXX" $OPT -I../stopcond parallel_hermite_4.cc $(for o in $OBJS; do echo $o.o; done) $EXTRA \
    ../stopcond/stopcond.o $G6_LIBS -o ../ph4_cpu
cd ..
echo "built $WORK/ph4_g6 (GRAPE-6 calls -> libgravpipe_g6) and $WORK/ph4_cpu (ph4's own CPU forces)"
