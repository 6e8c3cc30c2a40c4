// Fields read as what other fields make them (particle_store.hpp, "Derived fields").
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"

namespace gravpipe {

namespace {

constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // particles a materialize writes at a time

std::string quoted(const std::string& name) { return "'" + name + "'"; }

}  // namespace

const ParticleStore::Derivation* ParticleStore::find_derivation(const std::string& field) const {
  const auto it = std::find_if(derived_.begin(), derived_.end(), [&](const Derivation& d) { return d.field == field; });
  return it == derived_.end() ? nullptr : &*it;
}

void ParticleStore::derive_from(const std::string& field, const std::string& source, std::int64_t offset) {
  const FieldSpec& f = this->field(field);
  if (f.components != 1 || f.type != FieldType::I64)
    throw InputError("store: a derived field must be an int64 scalar field, " + quoted(field) + " is not");
  const FieldSpec& src = this->field(source);
  if (src.components != 1 || src.type != FieldType::I64)
    throw InputError("store: " + quoted(field) + " cannot be derived from " + quoted(source) +
                     ", which is not i64 with 1 component(s)");
  for (const Derivation& d : derived_)
    if (field == source || d.source == field || d.field == source)
      throw InputError("store: " + quoted(field) + " cannot be derived from " + quoted(source));
  if (field == source) throw InputError("store: " + quoted(field) + " cannot be derived from " + quoted(source));
  forget_derivation(field);
  Derivation d;
  d.field = field, d.source = source, d.offset = offset;
  derived_.push_back(d);
}

void ParticleStore::derive_curve_keys(const std::string& field, const std::string& pos, const CurveBox& frame,
                                      int threads) {
  const FieldSpec& f = this->field(field);
  if (f.components != 1 || f.type != FieldType::I64)
    throw InputError("store: a derived field must be an int64 scalar field, " + quoted(field) + " is not");
  const FieldSpec& src = this->field(pos);
  if (src.components != 3 || src.type != FieldType::F64)
    throw InputError("store: " + quoted(field) + " cannot be derived from " + quoted(pos) +
                     ", which is not f64 with 3 component(s)");
  for (const Derivation& d : derived_)
    if (field == pos || d.source == field || d.field == pos)
      throw InputError("store: " + quoted(field) + " cannot be derived from " + quoted(pos));
  if (!(std::isfinite(frame.lo[0]) && std::isfinite(frame.lo[1]) && std::isfinite(frame.lo[2]) &&
        std::isfinite(frame.scale) && frame.scale >= 0))
    throw InputError("store: a frame is a corner (3,) and a scale >= 0");
  forget_derivation(field);
  Derivation d;
  d.field = field, d.source = pos, d.curve_keys = true, d.frame = frame, d.threads = std::max(threads, 1);
  derived_.push_back(d);
}

void ParticleStore::forget_derivation(const std::string& field) {
  derived_.erase(std::remove_if(derived_.begin(), derived_.end(), [&](const Derivation& d) { return d.field == field; }),
                 derived_.end());
}

void ParticleStore::derived_values(const Derivation& d, std::int64_t begin, std::int64_t count, std::int64_t* out) {
  if (!d.curve_keys) {
    read(d.source, begin, count, out);
    const auto wrap = static_cast<std::uint64_t>(d.offset);  // int64 arithmetic wraps mod 2^64, as numpy's does
    for (std::int64_t k = 0; k < count; ++k)
      out[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(out[k]) + wrap);
    return;
  }
  std::vector<double> pos(static_cast<std::size_t>(3 * count));
  read(d.source, begin, count, pos.data());
  for (std::size_t k = 0; k < pos.size(); ++k)
    if (!std::isfinite(pos[k]))
      throw InputError("curve_keys: position " + std::to_string(k / 3) + " is not finite (" + std::to_string(pos[k]) +
                       ")");
  const std::vector<std::uint64_t> keys = curve_keys({pos.data(), pos.size()}, d.frame, d.threads);
  for (std::int64_t k = 0; k < count; ++k) out[k] = static_cast<std::int64_t>(keys[static_cast<std::size_t>(k)]);
}

void ParticleStore::materialize(const std::string& field) {
  const Derivation* found = find_derivation(field);
  if (found == nullptr) return;
  const Derivation d = *found;
  std::vector<std::int64_t> values;
  for (std::int64_t b = 0; b < n_; b += kChunk) {
    const std::int64_t count = std::min(kChunk, n_ - b);
    values.resize(static_cast<std::size_t>(count));
    derived_values(d, b, count, values.data());
    write(field, b, count, values.data());
  }
  forget_derivation(field);
  set_stale(field, false);
}

std::string ParticleStore::derivation(const std::string& field) const {
  const Derivation* d = find_derivation(field);
  if (d == nullptr) return "";
  return d->curve_keys ? "curve keys of " + d->source + " in a sort's frame"
                       : d->source + " + " + std::to_string(d->offset);
}

std::vector<std::pair<std::string, std::string>> ParticleStore::derivations() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Derivation& d : derived_) out.emplace_back(d.field, derivation(d.field));
  return out;
}

void ParticleStore::read_values(const std::string& field, std::int64_t begin, std::int64_t count, void* out) {
  if (const Derivation* d = find_derivation(field)) {
    check_range(field, begin, count);
    derived_values(*d, begin, count, static_cast<std::int64_t*>(out));
    return;
  }
  read(field, begin, count, out);
}

void ParticleStore::write_values(const std::string& field, std::int64_t begin, std::int64_t count,
                                 const void* values) {
  std::vector<std::string> dependent;
  for (const Derivation& d : derived_)
    if (d.field == field || d.source == field) dependent.push_back(d.field);
  for (const std::string& f : dependent) materialize(f);
  write(field, begin, count, values);
  ++user_writes_;
}

}  // namespace gravpipe
