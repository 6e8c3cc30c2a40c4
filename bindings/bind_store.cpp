// Bindings of the out-of-core store (gravpipe/particle_store.hpp and its parts): the store as
// a closable object with numpy range reads and writes, CRC32C, byte sizes, PagedParticles
// block reads for the tests, and block I/O timing for `gravpipe bench storage`. Arrays arrive
// validated and C-contiguous from gravpipe/store.py. I/O releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/crc32c.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/io_timing.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/paged_kick.hpp"
#include "gravpipe/store_sort.hpp"
#include "ndarray_views.hpp"
#include "store_box.hpp"
#include "streamed_build_box.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using bindings::Indices, bindings::to_numpy, bindings::StoreBox, bindings::StreamedBuildBox;
using Bytes = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using AnyF64 = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;
using AnyI64 = nb::ndarray<const std::int64_t, nb::c_contig, nb::device::cpu>;
// name, components, "f64" | "i64", page group ("" for none)
using FieldTuple = std::tuple<std::string, int, std::string, std::string>;

StoreConfig make_config(const std::string& directory, std::int64_t n, const std::vector<FieldTuple>& fields,
                        std::size_t page_bytes, std::uint64_t budget, std::uint64_t cache_bytes,
                        const std::string& eviction, const std::string& io_mode, int read_ahead, int threads) {
  StoreConfig c;
  c.directory = directory, c.n = n, c.page_bytes = page_bytes, c.budget_bytes = budget;
  c.cache_bytes = cache_bytes, c.eviction = parse_eviction(eviction), c.io_mode = parse_io_mode(io_mode);
  c.read_ahead = read_ahead, c.threads = threads;
  c.fields.clear();
  for (const auto& [name, comps, type, group] : fields) {
    if (type != "f64" && type != "i64") throw InputError("store: field '" + name + "' type must be f64 or i64");
    c.fields.push_back({name, comps, type == "f64" ? FieldType::F64 : FieldType::I64, group});
  }
  return c;
}

template <class Array>
void write_field(StoreBox& box, const std::string& field, std::int64_t begin, const Array& values, FieldType type) {
  ParticleStore& s = box.get();
  const FieldSpec& f = s.field(field);
  if (f.type != type)
    throw InputError("store: field '" + field + "' holds " + (f.type == FieldType::F64 ? "float64" : "int64"));
  if (values.size() % static_cast<std::size_t>(f.components) != 0)
    throw InputError("store: field '" + field + "' takes " + std::to_string(f.components) + " values per particle");
  const auto count = static_cast<std::int64_t>(values.size() / static_cast<std::size_t>(f.components));
  nb::gil_scoped_release release;
  s.write_values(field, begin, count, values.data());
}

/// `values`: a user's read (a derived field's values); else the pages as they are.
nb::object read_field(StoreBox& box, const std::string& field, std::int64_t begin, std::int64_t count,
                      bool values) {
  ParticleStore& s = box.get();
  const FieldSpec& f = s.field(field);
  if (count < 0) throw InputError("store: negative count");
  const auto n = static_cast<std::size_t>(count), comps = static_cast<std::size_t>(f.components);
  const auto read = [&](auto& v) {
    nb::gil_scoped_release release;
    if (values)
      s.read_values(field, begin, count, v.data());
    else
      s.read(field, begin, count, v.data());
  };
  if (f.type == FieldType::I64) {
    std::vector<std::int64_t> v(n * comps);
    read(v);
    return comps == 1 ? to_numpy(std::move(v), {n}) : to_numpy(std::move(v), {n, comps});
  }
  std::vector<double> v(n * comps);
  read(v);
  return comps == 1 ? to_numpy(std::move(v), {n}) : to_numpy(std::move(v), {n, comps});
}


/// x, y, z, m of the blocks [begins[k], ends[k]) read through PagedParticles by `threads`
/// OpenMP threads in parallel, concatenated in k order (the test compares with arrays).
nb::tuple read_blocks(StoreBox& box, Indices begins, Indices ends, int threads) {
  ParticleStore& s = box.get();
  if (begins.size() != ends.size()) throw InputError("read_blocks: begins and ends differ in length");
  const auto nb_ = static_cast<std::int64_t>(begins.size());
  std::vector<std::int64_t> offset(static_cast<std::size_t>(nb_) + 1, 0);
  for (std::int64_t k = 0; k < nb_; ++k) offset[k + 1] = offset[k] + std::max<std::int64_t>(0, ends.data()[k] - begins.data()[k]);
  const auto total = static_cast<std::size_t>(offset.back());
  std::vector<double> x(total), y(total), z(total), m(total);
  {
    nb::gil_scoped_release release;
    const int t = threads > 0 ? threads : omp_get_max_threads();
    const PagedParticles acc(s, "pos", "mass", t);
    std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(t)
    for (std::int64_t k = 0; k < nb_; ++k) {
      try {
        const ParticleBlock blk = acc.block(begins.data()[k], ends.data()[k]);
        for (std::int64_t i = blk.begin(); i < blk.end(); ++i) {
          const auto o = static_cast<std::size_t>(offset[k] + i - blk.begin());
          x[o] = blk.x(i), y[o] = blk.y(i), z[o] = blk.z(i), m[o] = blk.m(i);
        }
      } catch (...) {
#pragma omp critical(gravpipe_read_blocks_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }
  return nb::make_tuple(to_numpy(std::move(x), {total}), to_numpy(std::move(y), {total}),
                        to_numpy(std::move(z), {total}), to_numpy(std::move(m), {total}));
}

}  // namespace

nb::dict bindings::sort_stats_dict(const StoreSortStats& st) {
  nb::dict d;
  d["runs"] = st.runs;
  d["run_particles"] = st.run_particles;
  d["seconds_bounds"] = st.seconds_bounds;
  d["seconds_runs"] = st.seconds_runs;
  d["seconds_merge"] = st.seconds_merge;
  d["seconds_permute"] = st.seconds_permute;
  d["permute_lanes"] = st.permute_lanes;
  d["permute_in_merge"] = st.permute_in_merge;
  d["bytes_runs"] = std::vector<std::int64_t>{st.runs_read, st.runs_written};
  d["bytes_merge"] = std::vector<std::int64_t>{st.merge_read, st.merge_written};
  d["bytes_permute"] = std::vector<std::int64_t>{st.permute_read, st.permute_written};
  d["frame_lo"] = std::vector<double>{st.frame.lo[0], st.frame.lo[1], st.frame.lo[2]};
  d["frame_scale"] = st.frame.scale;
  d["bounds_lo"] = std::vector<double>{st.bounds.lo[0], st.bounds.lo[1], st.bounds.lo[2]};
  d["bounds_hi"] = std::vector<double>{st.bounds.hi[0], st.bounds.hi[1], st.bounds.hi[2]};
  d["kick_drift_applied"] = st.kick_drift_applied;
  d["presorted_used"] = st.presorted_used;
  return d;
}

nb::dict bindings::counters_dict(const StoreCounters& c) {
  nb::dict d;
  d["pages_read"] = c.pages_read;
  d["bytes_read"] = c.bytes_read;
  d["pages_written"] = c.pages_written;
  d["bytes_written"] = c.bytes_written;
  d["bytes_swapped"] = c.bytes_swapped();
  d["hits"] = c.hits;
  d["misses"] = c.misses;
  d["evictions"] = c.evictions;
  d["prefetched"] = c.prefetched;
  d["prefetch_hits"] = c.prefetch_hits;
  d["read_past"] = c.read_past;
  d["written_through"] = c.written_through;
  d["checksum_checks"] = c.checksum_checks;
  d["stall_seconds"] = c.stall_seconds;
  return d;
}

void bind_store(nb::module_& m) {
  m.def("page_table_bytes_per_page", [] { return PageCache::kTableBytesPerPage; },
        "Bytes a page of a scratch file costs the budget, cached or not: its CRC32C, written flag and frame.");
  m.def("crc32c", [](Bytes data, const std::string& impl) {
    const Crc32cImpl which = impl == "auto" ? Crc32cImpl::Auto : impl == "sse4.2" ? Crc32cImpl::Sse42
                             : impl == "portable" ? Crc32cImpl::Portable
                             : throw InputError("crc32c: unknown implementation '" + impl + "' (auto, sse4.2, portable)");
    return crc32c(Span<const unsigned char>(data.data(), data.size()), which);
  }, nb::arg("data"), nb::arg("impl") = "auto", "CRC32C (Castagnoli) of uint8 data (n,).");
  m.def("crc32c_implementation", [] { return crc32c_impl_name(resolve_crc32c(Crc32cImpl::Auto)); },
        "The CRC32C implementation pages are checked with here: 'sse4.2' or 'portable'.");
  m.def("parse_byte_size", &parse_byte_size, nb::arg("text"), "Bytes of '4GiB', '512MiB', '1.5GB', '65536'.");
  m.def("format_bytes", &format_bytes, nb::arg("bytes"), "Bytes as '4 GiB', '1.50 MiB'.");

  nb::class_<StoreBox>(m, "ParticleStore")
      .def("__init__",
           [](StoreBox* self, const std::string& directory, std::int64_t n, const std::vector<FieldTuple>& fields,
              std::size_t page_bytes, std::uint64_t budget, std::uint64_t cache_bytes, const std::string& eviction,
              const std::string& io_mode, int read_ahead, int threads) {
             new (self) StoreBox(make_config(directory, n, fields, page_bytes, budget, cache_bytes, eviction, io_mode,
                                             read_ahead, threads));
           },
           nb::arg("directory"), nb::arg("n"), nb::arg("fields"), nb::arg("page_bytes"), nb::arg("budget_bytes"),
           nb::arg("cache_bytes"), nb::arg("eviction"), nb::arg("io_mode"), nb::arg("read_ahead"), nb::arg("threads"))
      .def_static("least_budget",
                  [](std::int64_t n, const std::vector<FieldTuple>& fields, std::size_t page_bytes, int read_ahead,
                     int threads) {
                    return ParticleStore::least_budget(
                        make_config("", n, fields, page_bytes, 0, 0, "clock", "auto", read_ahead, threads));
                  },
                  nb::arg("n"), nb::arg("fields"), nb::arg("page_bytes"), nb::arg("read_ahead"), nb::arg("threads"))
      .def_static("page_count",
                  [](std::int64_t n, const std::vector<FieldTuple>& fields, std::size_t page_bytes) {
                    return ParticleStore::page_count(make_config("", n, fields, page_bytes, 0, 0, "clock", "auto", 0, 1));
                  },
                  nb::arg("n"), nb::arg("fields"), nb::arg("page_bytes"))
      .def("write_f64", [](StoreBox& b, const std::string& f, std::int64_t begin, AnyF64 v) {
        write_field(b, f, begin, v, FieldType::F64);
      })
      .def("write_i64", [](StoreBox& b, const std::string& f, std::int64_t begin, AnyI64 v) {
        write_field(b, f, begin, v, FieldType::I64);
      })
      .def("read", [](StoreBox& b, const std::string& f, std::int64_t begin,
                      std::int64_t count) { return read_field(b, f, begin, count, false); },
           nb::arg("field"), nb::arg("begin"), nb::arg("count"), "The field's pages as they are.")
      .def("read_values", [](StoreBox& b, const std::string& f, std::int64_t begin,
                             std::int64_t count) { return read_field(b, f, begin, count, true); },
           nb::arg("field"), nb::arg("begin"), nb::arg("count"), "The field's values (a derived field's too).")
      .def("derive_from",
           [](StoreBox& b, const std::string& f, const std::string& source, std::int64_t offset) {
             b.get().derive_from(f, source, offset);
           },
           nb::arg("field"), nb::arg("source"), nb::arg("offset"))
      .def("derive_curve_keys",
           [](StoreBox& b, const std::string& f, const std::string& pos, std::array<double, 3> lo, double scale,
              int threads) {
             CurveBox frame;
             std::copy(lo.begin(), lo.end(), frame.lo);
             frame.scale = scale;
             b.get().derive_curve_keys(f, pos, frame, threads > 0 ? threads : omp_get_max_threads());
           },
           nb::arg("field"), nb::arg("pos"), nb::arg("frame_lo"), nb::arg("frame_scale"), nb::arg("threads") = 0)
      .def("forget_derivation", [](StoreBox& b, const std::string& f) { b.get().forget_derivation(f); },
           nb::arg("field"))
      .def("materialize",
           [](StoreBox& b, const std::string& f) {
             ParticleStore& s = b.get();
             nb::gil_scoped_release release;
             s.materialize(f);
           },
           nb::arg("field"))
      .def("derivations", [](const StoreBox& b) { return b.get().derivations(); },
           "[(field, what it reads as)] of the derived fields")
      .def_prop_ro("user_writes", [](const StoreBox& b) { return b.get().user_writes(); })
      .def("flush", [](StoreBox& b) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        s.flush();
      })
      .def("evict_all", [](StoreBox& b) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        s.evict_all();
      })
      .def("discard", [](StoreBox& b, const std::string& f) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        s.discard(f);
      }, nb::arg("field"), "The field's values are dead until rewritten: its pages are never read back "
                           "(pages it shares with another field of its page group stay).")
      .def("discard_fields", [](StoreBox& b, const std::vector<std::string>& fields) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        s.discard_fields(fields);
      }, nb::arg("fields"), "discard for several fields: shared pages go when every field sharing them is listed.")
      .def("set_stale", [](StoreBox& b, const std::string& f, bool stale) { b.get().set_stale(f, stale); },
           nb::arg("field"), nb::arg("stale"),
           "Mark the field's pages as lagging behind its values (or, False, as holding every one).")
      .def("stale", [](const StoreBox& b, const std::string& f) { return b.get().stale(f); }, nb::arg("field"))
      .def("cool", [](StoreBox& b, const std::string& f, std::int64_t begin, std::int64_t end) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        s.cool(f, begin, end);
      }, nb::arg("field"), nb::arg("begin"), nb::arg("end"),
         "A sweep is done with particles [begin, end) of the field: the pages that end there go first.")
      .def("prefetch_pages", [](StoreBox& b, const std::vector<std::int64_t>& pages) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        return s.prefetch_pages(Span<const std::int64_t>(pages.data(), pages.size()));
      }, nb::arg("pages"), "Load pages ahead of their use, their reads in flight together; returns the loads that failed.")
      .def("clean_cold", [](StoreBox& b) {
        ParticleStore& s = b.get();
        nb::gil_scoped_release release;
        return s.cache().clean_cold();
      }, "Write back one batch of dirty pages next in line for eviction; returns how many.")
      .def("write_through",
           [](StoreBox& b, const std::vector<std::tuple<std::string, int>>& columns, std::int64_t begin,
              nb::ndarray<const std::uint64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> values,
              std::size_t staging_pages) {
             if (values.shape(0) != columns.size())
               throw InputError("store: write_through got " + std::to_string(values.shape(0)) + " rows of values for " +
                                std::to_string(columns.size()) + " columns");
             const auto count = static_cast<std::int64_t>(values.shape(1));
             std::vector<ParticleStore::ColumnIn> in;
             for (std::size_t k = 0; k < columns.size(); ++k)
               in.push_back({std::get<0>(columns[k]), std::get<1>(columns[k]), values.data() + k * values.shape(1)});
             ParticleStore& s = b.get();
             s.count_user_write();
             nb::gil_scoped_release release;
             BatchedPageIo io(s.file(), 16);
             AlignedBuffer staging(staging_pages * s.page_bytes());
             s.write_through(Span<const ParticleStore::ColumnIn>(in.data(), in.size()), begin, count, io, staging);
           },
           nb::arg("columns"), nb::arg("begin"), nb::arg("values"), nb::arg("staging_pages"),
           "Columns (field, component) of particles [begin, begin + count) from values (columns, count) of 8-byte "
           "elements: whole pages of columns that fill them straight to the file, staging_pages at a time.")
      .def_prop_ro("batched_reads", [](const StoreBox& b) { return b.get().batched_reads(); })
      .def_prop_ro("aio_contexts_made", [](const StoreBox& b) { return b.get().aio_pool().made(); },
                   "AIO contexts made for this store's batches (and its trees' cells), each lent again and again")
      .def_prop_ro("stale_files_removed",
                   [](const StoreBox& b) {
                     std::vector<std::tuple<std::string, long, std::uint64_t>> out;
                     for (const StalePageFile& f : b.get().stale_files_removed()) out.emplace_back(f.path, f.pid, f.bytes);
                     return out;
                   },
                   "(path, pid, bytes) of the page files of killed runs that the store removed from its directory")
      .def("close", &StoreBox::close)
      .def_prop_ro("closed", &StoreBox::closed)
      .def("page_of", [](const StoreBox& b, const std::string& f, int c, std::int64_t i) { return b.get().page_of(f, c, i); })
      .def("counters", [](const StoreBox& b) { return bindings::counters_dict(b.get().counters()); })
      .def("reset_counters", [](StoreBox& b) { b.get().reset_counters(); })
      .def("read_ahead_failures", [](const StoreBox& b) { return b.get().read_ahead_failures(); })
      .def_prop_ro("path", [](const StoreBox& b) { return b.get().file().path(); })
      .def_prop_ro("io_mode", [](const StoreBox& b) { return io_mode_name(b.get().file().mode()); })
      .def_prop_ro("io_detail", [](const StoreBox& b) { return b.get().file().mode_detail(); })
      .def_prop_ro("in_memory", [](const StoreBox& b) { return b.get().file().in_memory(); })
      .def_prop_ro("eviction", [](const StoreBox& b) { return eviction_name(b.get().eviction()); })
      .def_prop_ro("frames", [](const StoreBox& b) { return b.get().frames(); })
      .def_prop_ro("pages", [](const StoreBox& b) { return b.get().pages(); })
      .def_prop_ro("page_bytes", [](const StoreBox& b) { return b.get().page_bytes(); })
      .def("particles_per_page", [](const StoreBox& b, const std::string& f) { return b.get().particles_per_page(f); },
           nb::arg("field"))
      .def_prop_ro("budget_total", [](const StoreBox& b) { return b.get().budget().total(); })
      .def_prop_ro("budget_used", [](const StoreBox& b) { return b.get().budget().used(); })
      .def_prop_ro("budget_peak", [](const StoreBox& b) { return b.get().budget().peak(); });

  m.def("store_sort_by_curve",
        [](StoreBox& b, const std::vector<std::string>& carried, std::uint64_t buffer_bytes, int threads,
           std::optional<std::tuple<double, double, std::array<double, 3>, std::array<double, 3>>> kick_drift,
           bool overlap_reads, StreamedBuildBox* tree,
           std::optional<std::tuple<std::array<double, 3>, std::array<double, 3>>> frame, bool write_keys) {
          ParticleStore& s = b.get();
          StoreSortConfig config{carried, buffer_bytes, threads > 0 ? threads : omp_get_max_threads()};
          config.overlap_reads = overlap_reads;
          config.write_keys = write_keys;
          if (frame) {
            const auto& [lo, hi] = *frame;
            for (int a = 0; a < 3; ++a)
              if (!std::isfinite(lo[a]) || !std::isfinite(hi[a]) || !(hi[a] >= lo[a]))
                throw InputError("store sort: the frame's corners must be finite with hi >= lo");
            config.frame = curve_box(lo.data(), hi.data());
          }
          if (kick_drift) {
            const auto& [h, dt, lo, hi] = *kick_drift;
            SortKickDrift k{h, dt, {}};
            std::copy(lo.begin(), lo.end(), k.bounds.lo), std::copy(hi.begin(), hi.end(), k.bounds.hi);
            config.kick_drift = k;
          }
          if (tree != nullptr) config.observer = &tree->get();
          StoreSortStats st;
          {
            nb::gil_scoped_release release;
            st = sort_store_by_curve(s, config);
          }
          s.forget_derivation("key");  // the pages hold every key now: no derivation stands for them
          return bindings::sort_stats_dict(st);
        },
        nb::arg("store"), nb::arg("carried"), nb::arg("buffer_bytes"), nb::arg("threads") = 0,
        nb::arg("kick_drift").none() = nb::none(), nb::arg("overlap_reads") = true,
        nb::arg("tree").none() = nb::none(), nb::arg("frame").none() = nb::none(), nb::arg("write_keys") = true,
        "Sort the store into curve order by (key, index) through its twin fields (store_sort.hpp): the "
        "pieces a step of the paged leapfrog assembles, for tests and benchmarks. kick_drift (h, dt, lo, hi): "
        "vel += h acc, pos += dt vel as the runs are read, keyed in the frame of the predicted bounds [lo, hi] of "
        "the drifted positions; 'kick_drift_applied' is False (and the store unchanged) when the prediction "
        "missed. overlap_reads: with several runs, the next run is read on a loader thread meanwhile (shorter "
        "runs; the same bits). tree (a StreamedTreeBuild): builds the out-of-core tree's cells from the "
        "particles as the sort writes them. frame (lo (3,), hi (3,)): key in the cube over this box (curve_box, as "
        "DomainTree's frame_lo/frame_hi) instead of the positions' own.");
  m.def("sort_run_bytes_per_particle", &sort_run_bytes_per_particle, nb::arg("kick_drift"),
        nb::arg("overlap_reads") = false,
        "Sort buffer bytes a particle of a run takes (one run needs n times this with overlap_reads False; "
        "several runs read overlapped take the larger figure).");
  m.def("sort_run_writer_bytes", &SortRunWriter::budget_bytes, nb::arg("run"),
        "Bytes of the budget the walk's run writer takes for runs of `run` particles.");
  m.def("least_sort_buffer", &least_sort_buffer, nb::arg("n"), "The least sort buffer (bytes) for n particles.");
  m.def("store_kick_drift",
        [](StoreBox& b, double h, double dt, std::int64_t block) {
          ParticleStore& s = b.get();
          nb::gil_scoped_release release;
          paged_kick_drift(s, h, dt, block);
        },
        nb::arg("store"), nb::arg("h"), nb::arg("dt"), nb::arg("block"), "vel += h acc; pos += dt vel on the pages.");
  m.def("store_read_blocks", &read_blocks, nb::arg("store"), nb::arg("begins"), nb::arg("ends"), nb::arg("threads") = 0,
        "x, y, z, m (each (sum of block lengths,)) of blocks [begins[k], ends[k]) read through PagedParticles by "
        "OpenMP threads in parallel, concatenated in k order.");

  m.def("time_block_io",
        [](const std::string& directory, std::size_t block_bytes, int repeats, const std::string& io_mode) {
          IoTiming t;
          {
            nb::gil_scoped_release release;
            t = time_block_io(directory, block_bytes, repeats, parse_io_mode(io_mode));
          }
          nb::dict d;
          d["write_seconds"] = t.write_seconds;
          d["read_seconds"] = t.read_seconds;
          d["io_mode"] = io_mode_name(t.mode);
          d["io_detail"] = t.mode_detail;
          return d;
        },
        nb::arg("directory"), nb::arg("block_bytes"), nb::arg("repeats"), nb::arg("io_mode") = "auto",
        "Seconds per block write and read (lists of `repeats`) to a new scratch file in `directory`, and the I/O "
        "mode used.");

  m.def("time_page_checksum",
        [](std::size_t page_bytes, std::size_t pages, int hot_repeats) {
          ChecksumTiming t;
          {
            nb::gil_scoped_release release;
            t = time_page_checksum(page_bytes, pages, hot_repeats);
          }
          nb::dict d;
          d["cold_gb_s"] = t.cold_gb_s;
          d["hot_gb_s"] = t.hot_gb_s;
          d["implementation"] = t.implementation;
          return d;
        },
        nb::arg("page_bytes") = 65536, nb::arg("pages") = 4096, nb::arg("hot_repeats") = 4096,
        "CRC32C speed (GB/s, 1e9 bytes) on `pages` pages out of the CPU's caches (cold_gb_s) and on one page in them "
        "(hot_gb_s), and the implementation that ran.");
}
