#include "cache/hdf5_handle.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace sluice::cache::h5 {
namespace {

std::recursive_mutex hdf5_mutex;
std::once_flag no_atexit_once;

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* error, void* data) {
  auto& lines = *static_cast<std::vector<std::string>*>(data);
  std::string line = std::string(error->func_name ? error->func_name : "?") +
                     "(): " + (error->desc ? error->desc : "");
  if (lines.empty() || lines.back() != line) lines.push_back(std::move(line));
  return 0;
}

// A selection of rows [first, first + count) of a dataset, plus the matching memory space.
struct RowSelection {
  Dataspace file_space;
  Dataspace memory_space;
};

RowSelection select_rows(const Dataset& dataset, hsize_t first, hsize_t count, const Where& where) {
  RowSelection selection;
  selection.file_space = Dataspace(check(H5Dget_space(dataset.id()), "H5Dget_space", where));
  int rank = check(H5Sget_simple_extent_ndims(selection.file_space.id()),
                   "H5Sget_simple_extent_ndims", where);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  check(H5Sget_simple_extent_dims(selection.file_space.id(), dims.data(), nullptr),
        "H5Sget_simple_extent_dims", where);
  if (rank < 1 || first + count > dims[0]) {
    throw CacheError("rows " + std::to_string(first) + ".." + std::to_string(first + count) +
                     " are outside " + where.describe() + ", which has " +
                     std::to_string(rank < 1 ? 0 : dims[0]) + " rows");
  }
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> counts = dims;
  start[0] = first;
  counts[0] = count;
  check(H5Sselect_hyperslab(selection.file_space.id(), H5S_SELECT_SET, start.data(), nullptr,
                            counts.data(), nullptr),
        "H5Sselect_hyperslab", where);
  selection.memory_space =
      Dataspace(check(H5Screate_simple(rank, counts.data(), nullptr), "H5Screate_simple", where));
  return selection;
}

}  // namespace

std::unique_lock<std::recursive_mutex> lock() {
  // Before the library's first call in this process (it initialises then): no clean-up at exit.
  // HDF5's atexit handler (H5_term_library) closes every file still open. A file whose H5Fclose
  // failed (the disk filled while its metadata was flushed) stays registered half-closed, and
  // closing it again at exit dereferences freed state: SIGSEGV in H5F__close_cb after main
  // returned, replacing the job's clear error and exit code with a crash. Every file sluice
  // writes is closed (or given up, its temporary removed) by its handle before exit, and a
  // process's exit releases what is left, so nothing is lost by skipping that clean-up.
  std::call_once(no_atexit_once, [] { H5dont_atexit(); });
  std::unique_lock<std::recursive_mutex> held(hdf5_mutex);
  // The exception carries the useful part of the stack; printing it as well would only add
  // noise (and would print for errors the caller handles, such as probing a missing attribute).
  // Debian's HDF5 is built thread-safe, and there the error stack and its printing are per
  // thread: switching printing off once would leave it on in the prep writer thread, which then
  // dumped ~140 lines of HDF5 diagnostics before sluice's own message. So once per thread.
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
  return held;
}

ErrorStack take_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &lines);
  H5Eclear2(H5E_DEFAULT);
  ErrorStack stack;
  // The file drivers report a failed system call as "... errno = 28, error message = '...' ...":
  // that errno says what went wrong far better than the stack, and the line itself (time,
  // buffer address, file descriptor) is noise once it is known.
  for (std::string& line : lines) {
    const size_t at = line.find("errno = ");
    if (at == std::string::npos) continue;
    stack.error_number = std::atoi(line.c_str() + at + 8);
    line = line.substr(0, line.find(':')) + "(): " + std::strerror(stack.error_number);
    break;
  }
  // The innermost entries say what went wrong; the outer ones only how the call got there.
  const size_t shown = std::min<size_t>(lines.size(), 3);
  for (size_t i = 0; i < shown; ++i) stack.detail += (i ? " <- " : "") + lines[i];
  if (lines.size() > shown) stack.detail += " <- ...";
  return stack;
}

std::string take_error_detail() { return take_error_stack().detail; }

void fail(const char* call, const Where& where) {
  const ErrorStack stack = take_error_stack();
  if (is_environment_errno(stack.error_number)) {
    throw EnvironmentError(describe_errno(stack.error_number) + ": HDF5 " + call + " on " + where.describe() +
                           "; " + environment_advice(stack.error_number, where.file));
  }
  throw CacheError("HDF5 " + std::string(call) + " failed for " + where.describe() +
                   (stack.detail.empty() ? std::string() : ": " + stack.detail));
}

void log_close_failure(const char* kind, hid_t id) noexcept {
  try {
    log::get("cache")->warn("closing HDF5 {} (id {}) failed; its file may not be complete", kind,
                            static_cast<long long>(id));
  } catch (...) {
    // Logging must not turn a destructor into a throwing one.
  }
}

void log_abandoned_close(const char* kind, const std::string& detail) noexcept {
  try {
    log::get("cache")->debug("closing an HDF5 {} given up after an error failed too: {}", kind, detail);
  } catch (...) {
  }
}

File create_file(const std::string& path, uint64_t alignment) {
  const Where where{path, ""};
  PropertyList access(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", where));
  if (alignment > 0) {
    check(H5Pset_alignment(access.id(), 1024, alignment), "H5Pset_alignment", where);
  }
  return File(
      check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id()), "H5Fcreate", where));
}

File open_file(const std::string& path) {
  return File(
      check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", Where{path, ""}));
}

bool has_link(hid_t location, const std::string& name, const Where& where) {
  return check(H5Lexists(location, name.c_str(), H5P_DEFAULT), "H5Lexists", where) > 0;
}

Dataset create_chunked(hid_t file, const std::string& name, hid_t file_type,
                       const std::vector<hsize_t>& dims, hsize_t chunk_rows, int gzip_level,
                       const Where& where) {
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> max_dims = dims;
  max_dims[0] = H5S_UNLIMITED;  // also lets an empty column be chunked (chunk > extent)
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::max<hsize_t>(chunk_rows, 1);
  Dataspace space(
      check(H5Screate_simple(rank, dims.data(), max_dims.data()), "H5Screate_simple", where));
  PropertyList create(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", where));
  check(H5Pset_chunk(create.id(), rank, chunk.data()), "H5Pset_chunk", where);
  // HDF5 >= 1.10.7 refuses every filter on variable-length data ("not suitable for filters"):
  // those datasets (the string columns) are chunked but unfiltered, and their integrity is checked
  // through the strings_xxh64 attribute instead (docs/cache-format.md).
  const bool variable_length =
      check(H5Tis_variable_str(file_type), "H5Tis_variable_str", where) > 0 ||
      check(H5Tget_class(file_type), "H5Tget_class", where) == H5T_VLEN;
  if (!variable_length) {
    if (gzip_level > 0) {
      check(H5Pset_deflate(create.id(), static_cast<unsigned>(gzip_level)), "H5Pset_deflate",
            where);
    }
    // Last in the pipeline, so the checksum covers the bytes as stored (compressed or not) and is
    // checked first on read, before anything tries to decompress damaged data.
    check(H5Pset_fletcher32(create.id()), "H5Pset_fletcher32", where);
  }
  // No timestamps: the same input gives byte-identical files.
  check(H5Pset_obj_track_times(create.id(), false), "H5Pset_obj_track_times", where);
  return Dataset(check(
      H5Dcreate2(file, name.c_str(), file_type, space.id(), H5P_DEFAULT, create.id(), H5P_DEFAULT),
      "H5Dcreate2", where));
}

Dataset open_dataset(hid_t file, const std::string& name, const Where& where,
                     int64_t chunk_cache_bytes) {
  if (chunk_cache_bytes < 0) {
    return Dataset(check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen2", where));
  }
  PropertyList access(check(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate", where));
  check(H5Pset_chunk_cache(access.id(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT,
                           static_cast<size_t>(chunk_cache_bytes), H5D_CHUNK_CACHE_W0_DEFAULT),
        "H5Pset_chunk_cache", where);
  return Dataset(check(H5Dopen2(file, name.c_str(), access.id()), "H5Dopen2", where));
}

std::vector<hsize_t> extent(const Dataset& dataset, const Where& where) {
  Dataspace space(check(H5Dget_space(dataset.id()), "H5Dget_space", where));
  int rank = check(H5Sget_simple_extent_ndims(space.id()), "H5Sget_simple_extent_ndims", where);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  check(H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr), "H5Sget_simple_extent_dims",
        where);
  return dims;
}

std::vector<hsize_t> chunk_shape(const Dataset& dataset, const Where& where) {
  PropertyList create(check(H5Dget_create_plist(dataset.id()), "H5Dget_create_plist", where));
  if (check(H5Pget_layout(create.id()), "H5Pget_layout", where) != H5D_CHUNKED) return {};
  hsize_t dims[H5S_MAX_RANK];
  int rank = check(H5Pget_chunk(create.id(), H5S_MAX_RANK, dims), "H5Pget_chunk", where);
  return std::vector<hsize_t>(dims, dims + rank);
}

bool has_fletcher32(const Dataset& dataset, const Where& where) {
  PropertyList create(check(H5Dget_create_plist(dataset.id()), "H5Dget_create_plist", where));
  int filters = check(H5Pget_nfilters(create.id()), "H5Pget_nfilters", where);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    size_t n_values = 0;
    unsigned config = 0;
    H5Z_filter_t filter = check(H5Pget_filter2(create.id(), static_cast<unsigned>(i), &flags,
                                               &n_values, nullptr, 0, nullptr, &config),
                                "H5Pget_filter2", where);
    if (filter == H5Z_FILTER_FLETCHER32) return true;
  }
  return false;
}

std::vector<H5Z_filter_t> filters(const Dataset& dataset, const Where& where) {
  PropertyList create(check(H5Dget_create_plist(dataset.id()), "H5Dget_create_plist", where));
  const int count = check(H5Pget_nfilters(create.id()), "H5Pget_nfilters", where);
  std::vector<H5Z_filter_t> result;
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0;
    size_t n_values = 0;
    unsigned config = 0;
    result.push_back(check(H5Pget_filter2(create.id(), static_cast<unsigned>(i), &flags, &n_values,
                                          nullptr, 0, nullptr, &config),
                           "H5Pget_filter2", where));
  }
  return result;
}

hid_t ieee_f16le() {
  static const hid_t type = [] {
    const Where where{"(HDF5)", "float16 type"};
    const hid_t made = check(H5Tcopy(H5T_IEEE_F32LE), "H5Tcopy", where);
    check(H5Tset_fields(made, 15, 10, 5, 0, 10), "H5Tset_fields", where);
    check(H5Tset_size(made, 2), "H5Tset_size", where);
    check(H5Tset_ebias(made, 15), "H5Tset_ebias", where);
    check(H5Tlock(made), "H5Tlock", where);
    return made;
  }();
  return type;
}

bool stored_type_is(const Dataset& dataset, hid_t type, const Where& where) {
  Datatype stored(check(H5Dget_type(dataset.id()), "H5Dget_type", where));
  return check(H5Tequal(stored.id(), type), "H5Tequal", where) > 0;
}

void flush(const Dataset& dataset, const Where& where) {
  check(H5Dflush(dataset.id()), "H5Dflush", where);
}

ChunkPlace chunk_place(const Dataset& dataset, const hsize_t* offset, const Where& where) {
  unsigned mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t bytes = 0;
  check(H5Dget_chunk_info_by_coord(dataset.id(), offset, &mask, &address, &bytes),
        "H5Dget_chunk_info_by_coord", where);
  if (address == HADDR_UNDEF || bytes == 0) {
    throw CacheError("the chunk of " + where.describe() + " at row " + std::to_string(offset[0]) +
                     " was never written: the file is damaged");
  }
  return ChunkPlace{address, bytes, mask};
}

size_t read_raw_chunk(const Dataset& dataset, const hsize_t* offset, void* buffer, size_t capacity,
                      uint32_t& filter_mask, const Where& where) {
  hsize_t stored = 0;
  check(H5Dget_chunk_storage_size(dataset.id(), offset, &stored), "H5Dget_chunk_storage_size",
        where);
  if (stored == 0 || stored > capacity) {
    throw CacheError("the chunk of " + where.describe() + " at row " + std::to_string(offset[0]) +
                     " has a stored size of " + std::to_string(stored) + " bytes, expected " +
                     std::to_string(capacity) + ": the file's chunk index is damaged");
  }
  check(H5Dread_chunk(dataset.id(), H5P_DEFAULT, offset, &filter_mask, buffer), "H5Dread_chunk",
        where);
  return static_cast<size_t>(stored);
}

void write_raw_chunk(const Dataset& dataset, const hsize_t* offset, uint32_t filter_mask,
                     const void* bytes, size_t size, const Where& where) {
  check(H5Dwrite_chunk(dataset.id(), H5P_DEFAULT, filter_mask, offset, size, bytes), "H5Dwrite_chunk",
        where);
}

uint32_t fletcher32(const void* data_pointer, size_t bytes) {
  // HDF5 adds each big-endian 16-bit word w_j to sum1 and then sum1 to sum2, folding both every
  // 360 words. Per block of n words that is sum1 += S and sum2 += n * sum1 + T with S = sum(w_j)
  // and T = sum((n - j) * w_j); all in uint32 arithmetic, so the result is bit-identical. S and T
  // are computed over 8 lanes with additions only, which compilers vectorise.
  const auto* data = static_cast<const uint8_t*>(data_pointer);
  auto word = [](const uint8_t* p) { return (static_cast<uint32_t>(p[0]) << 8) | p[1]; };
  size_t words = bytes / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (words > 0) {
    const uint32_t n = words > 360 ? 360u : static_cast<uint32_t>(words);
    words -= n;
    const uint32_t groups = n / 8;
    uint32_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // a[l] = sum over groups i of w(8i + l)
    uint32_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // b[l] = sum over i of (groups - 1 - i) w(8i + l)
    for (uint32_t i = 0; i < groups; ++i) {
      const uint8_t* p = data + 16 * i;
      for (uint32_t l = 0; l < 8; ++l) {
        b[l] += a[l];
        a[l] += word(p + 2 * l);
      }
    }
    uint32_t s = 0, t = 0;
    for (uint32_t l = 0; l < 8; ++l) {
      s += a[l];
      t += 8 * (b[l] + a[l]) - l * a[l];  // sum over i of (8 * groups - (8i + l)) w(8i + l)
    }
    t += (n - 8 * groups) * s;
    for (uint32_t j = 8 * groups; j < n; ++j) {
      const uint32_t w = word(data + 2 * j);
      s += w;
      t += (n - j) * w;
    }
    sum2 += n * sum1 + t;
    sum1 += s;
    data += 2 * static_cast<size_t>(n);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes % 2) {
    sum1 += static_cast<uint32_t>(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

void set_extent(const Dataset& dataset, const std::vector<hsize_t>& dims, const Where& where) {
  check(H5Dset_extent(dataset.id(), dims.data()), "H5Dset_extent", where);
}

H5T_class_t type_class(const Dataset& dataset, const Where& where) {
  Datatype type(check(H5Dget_type(dataset.id()), "H5Dget_type", where));
  return check(H5Tget_class(type.id()), "H5Tget_class", where);
}

void write_rows(const Dataset& dataset, hid_t mem_type, hsize_t first, hsize_t count,
                const void* data, const Where& where) {
  if (count == 0) return;
  RowSelection selection = select_rows(dataset, first, count, where);
  check(H5Dwrite(dataset.id(), mem_type, selection.memory_space.id(), selection.file_space.id(),
                 H5P_DEFAULT, data),
        "H5Dwrite", where);
}

void read_rows(const Dataset& dataset, hid_t mem_type, hsize_t first, hsize_t count, void* data,
               const Where& where) {
  if (count == 0) return;
  RowSelection selection = select_rows(dataset, first, count, where);
  check(H5Dread(dataset.id(), mem_type, selection.memory_space.id(), selection.file_space.id(),
                H5P_DEFAULT, data),
        "H5Dread", where);
}

Datatype utf8_string_type() {
  const Where where{"(memory)", "variable-length UTF-8 string type"};
  Datatype type(check(H5Tcopy(H5T_C_S1), "H5Tcopy", where));
  check(H5Tset_size(type.id(), H5T_VARIABLE), "H5Tset_size", where);
  check(H5Tset_cset(type.id(), H5T_CSET_UTF8), "H5Tset_cset", where);
  return type;
}

void write_string_rows(const Dataset& dataset, hsize_t first, const std::vector<std::string>& rows,
                       const Where& where) {
  if (rows.empty()) return;
  std::vector<const char*> pointers(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) pointers[i] = rows[i].c_str();
  Datatype type = utf8_string_type();
  // Strings are converted on the way (a pointer in memory, a 16-byte global-heap reference in the
  // file), through a conversion and a background buffer that H5Dwrite otherwise allocates and
  // zero-fills at their default size, 1 MiB each, on every call: for a shard's 256-row column
  // 16 bytes a row are enough. Capped at that default, so that a longer column is converted in
  // the same pieces as before; the file's bytes are the same either way.
  constexpr size_t default_buffer = size_t{1} << 20;
  const size_t bytes = std::min(default_buffer, rows.size() * size_t{16});
  std::vector<unsigned char> conversion(bytes), background(bytes);
  PropertyList transfer(check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", where));
  check(H5Pset_buffer(transfer.id(), bytes, conversion.data(), background.data()), "H5Pset_buffer", where);
  RowSelection selection = select_rows(dataset, first, rows.size(), where);
  check(H5Dwrite(dataset.id(), type.id(), selection.memory_space.id(), selection.file_space.id(), transfer.id(),
                 pointers.data()),
        "H5Dwrite", where);
}

std::vector<std::string> read_string_rows(const Dataset& dataset, hsize_t first, hsize_t count,
                                          const Where& where) {
  std::vector<std::string> rows;
  if (count == 0) return rows;
  Datatype type = utf8_string_type();
  RowSelection selection = select_rows(dataset, first, count, where);
  std::vector<char*> pointers(count, nullptr);
  herr_t status = H5Dread(dataset.id(), type.id(), selection.memory_space.id(),
                          selection.file_space.id(), H5P_DEFAULT, pointers.data());
  if (status < 0) {
    std::string detail = take_error_detail();
    H5Dvlen_reclaim(type.id(), selection.memory_space.id(), H5P_DEFAULT, pointers.data());
    H5Eclear2(H5E_DEFAULT);
    throw CacheError("HDF5 H5Dread failed for " + where.describe() + ": " + detail);
  }
  rows.reserve(count);
  for (char* text : pointers) rows.emplace_back(text ? text : "");
  check(H5Dvlen_reclaim(type.id(), selection.memory_space.id(), H5P_DEFAULT, pointers.data()),
        "H5Dvlen_reclaim", where);
  return rows;
}

void write_attribute(hid_t object, const std::string& name, const std::string& value,
                     const Where& where) {
  const Where at = where.with("attribute " + name);
  Datatype type = utf8_string_type();
  Dataspace space(check(H5Screate(H5S_SCALAR), "H5Screate", at));
  Attribute attribute(
      check(H5Acreate2(object, name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
            "H5Acreate2", at));
  const char* text = value.c_str();
  check(H5Awrite(attribute.id(), type.id(), &text), "H5Awrite", at);
}

void write_attribute(hid_t object, const std::string& name, int64_t value, const Where& where) {
  const Where at = where.with("attribute " + name);
  Dataspace space(check(H5Screate(H5S_SCALAR), "H5Screate", at));
  Attribute attribute(
      check(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT),
            "H5Acreate2", at));
  check(H5Awrite(attribute.id(), H5T_NATIVE_INT64, &value), "H5Awrite", at);
}

bool has_attribute(hid_t object, const std::string& name, const Where& where) {
  return check(H5Aexists(object, name.c_str()), "H5Aexists", where.with("attribute " + name)) > 0;
}

std::string read_string_attribute(hid_t object, const std::string& name, const Where& where) {
  const Where at = where.with("attribute " + name);
  Attribute attribute(check(H5Aopen(object, name.c_str(), H5P_DEFAULT), "H5Aopen", at));
  Datatype stored(check(H5Aget_type(attribute.id()), "H5Aget_type", at));
  if (check(H5Tget_class(stored.id()), "H5Tget_class", at) != H5T_STRING) {
    throw CacheError(at.describe() + " is not a string");
  }
  if (check(H5Tis_variable_str(stored.id()), "H5Tis_variable_str", at) > 0) {
    Datatype type = utf8_string_type();
    char* text = nullptr;
    check(H5Aread(attribute.id(), type.id(), &text), "H5Aread", at);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  size_t size = H5Tget_size(stored.id());
  if (size == 0) fail("H5Tget_size", at);
  Datatype type(check(H5Tcopy(H5T_C_S1), "H5Tcopy", at));
  check(H5Tset_size(type.id(), size), "H5Tset_size", at);
  std::string value(size, '\0');
  check(H5Aread(attribute.id(), type.id(), value.data()), "H5Aread", at);
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  return value;
}

int64_t read_int_attribute(hid_t object, const std::string& name, const Where& where) {
  const Where at = where.with("attribute " + name);
  Attribute attribute(check(H5Aopen(object, name.c_str(), H5P_DEFAULT), "H5Aopen", at));
  Datatype stored(check(H5Aget_type(attribute.id()), "H5Aget_type", at));
  if (check(H5Tget_class(stored.id()), "H5Tget_class", at) != H5T_INTEGER) {
    throw CacheError(at.describe() + " is not an integer");
  }
  int64_t value = 0;
  check(H5Aread(attribute.id(), H5T_NATIVE_INT64, &value), "H5Aread", at);
  return value;
}

}  // namespace sluice::cache::h5
