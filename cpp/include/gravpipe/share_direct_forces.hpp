// Direct summation over processes with distributed state (GRAPE-6's j-memory per board;
// PARNASS, seed 001; phiGRAPE, NBODY6++): every process holds only its own share of the
// particles, in its own local pipeline as j-particles, and an integrator on that share
// (hermite.hpp, leapfrog.hpp with a ShareAgreement) asks for the forces on its active
// particles. A request is a collective: the active i-particles of every process are
// gathered to all of them (the block, never all N: a large block goes in rounds of at most
// max_block), each process computes the partial forces of its j-share on the whole block,
// and each process receives the partials of its own i-particles from every process and adds
// them in rank order (0, 1, ..., P-1), so that a run is bitwise reproducible for a given
// number of processes (MPI_Allreduce promises no order). The messages themselves go through
// ShareCollectives, which the caller implements (MPI through mpi4py): the core has no MPI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gravpipe/force_provider.hpp"
#include "gravpipe/share_agreement.hpp"

namespace gravpipe {

/// The collectives of a share run over `ranks` processes, this one being `rank`. Every
/// process calls each of them in the same order; buffers are in rank order.
struct ShareCollectives {
  int rank = 0, ranks = 1;
  /// The least of every process's value (MPI_Allreduce, MPI_MIN).
  GlobalMin min;
  /// all[k r + c] = process r's mine[c] (mine: k values, the same k everywhere; MPI_Allgather).
  std::function<void(Span<const std::int64_t> mine, Span<std::int64_t> all)> allgather;
  /// recv = every process's send in rank order, counts[r] doubles from process r (MPI_Allgatherv).
  std::function<void(Span<const double> send, Span<const std::int64_t> counts, Span<double> recv)> allgatherv;
  /// send: send_counts[r] doubles for each process r in rank order; recv: recv_counts[r]
  /// doubles from each process r in rank order (MPI_Alltoallv).
  std::function<void(Span<const double> send, Span<const std::int64_t> send_counts, Span<double> recv,
                     Span<const std::int64_t> recv_counts)>
      alltoallv;
};

/// Messages of this process since its creation: the payload it sent to and received from
/// other processes (its own part of a collective not counted), in bytes.
struct ShareTraffic {
  std::uint64_t requests = 0;        // force requests (Hermite: blocks; leapfrog: steps)
  std::uint64_t rounds = 0;          // i-blocks exchanged (a request's block in pieces of max_block)
  std::uint64_t agreements = 0;      // global minima taken
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::size_t largest_block = 0;     // the most i-particles of one round (gathered on every process)
  std::size_t largest_receive = 0;   // the most partial-force records received in one round
};

class ShareDirectForces final : public ForceProvider {
 public:
  /// local: this process's pipeline, which receives its j-share (set_j here); n_total: the
  /// particles of all processes (>= 1); max_block: the most i-particles gathered in one
  /// round, and the most partial-force records received in one (>= ranks).
  ShareDirectForces(ForceProvider& local, ShareCollectives comm, std::int64_t n_total, std::size_t max_block);

  /// This process's j-share (any n >= 0, the same n for the life of the provider).
  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  /// Total forces on this process's i-particles of `req` (any n_i >= 0; exclude: indices
  /// into this process's j-share) from the j-shares of all processes: a collective.
  void forces(const ForceRequest& req) override;
  /// The local pipeline's counters, with the interactions of all processes and the wall time
  /// of every collective (the agreements too) as seconds_comm.
  PipelineStats stats() const override;

  /// A GPU that predicts j-particles itself keeps doing so for its share.
  bool predicts_j() const override { return local_.predicts_j(); }
  void write_j_taylor(const JTaylor& j) override;
  void predict_j(std::int64_t now_ticks, double tick) override;

  /// The global minimum of the collectives, timed with the others (an integrator's agreement).
  std::int64_t global_min(std::int64_t mine);
  ShareTraffic traffic() const { return traffic_; }
  int rank() const { return comm_.rank; }
  int ranks() const { return comm_.ranks; }

 private:
  struct Round {
    std::vector<std::int64_t> part;  // i-particles of each process in this round
    std::size_t first = 0;           // this process's first request row in it
  };
  void check_request(const ForceRequest& req, std::size_t n_i) const;
  void gather_block(const ForceRequest& req, const Round& r, std::size_t width);
  void compute_partials(bool with_jerk);
  void return_partials(const ForceRequest& req, const Round& r, std::size_t width);

  ForceProvider& local_;
  ShareCollectives comm_;
  std::int64_t n_total_;
  std::size_t max_block_;
  bool has_j_ = false, j_has_vel_ = false;
  std::size_t n_j_ = 0;                    // this process's j-particles
  std::vector<std::int64_t> counts_;       // per process: i-particles of the request (and exclusions)
  std::vector<std::int64_t> sizes_;        // per process: doubles of a collective's part
  std::vector<std::int64_t> back_;         // per process: doubles received from it
  std::vector<double> send_, block_, partial_, recv_;
  std::vector<double> bpos_, bvel_, bacc_, bpot_, bjerk_;  // the round's i-block and its partials
  std::vector<std::int64_t> bexclude_;
  std::uint64_t interactions_ = 0;         // of all processes
  double seconds_comm_ = 0;
  ShareTraffic traffic_;
};

}  // namespace gravpipe
