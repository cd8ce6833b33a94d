#pragma once
// INTERNAL to cache/: only cache/*.cpp include this header (it includes hdf5.h; public cache
// headers never do, and sluice_cache links HDF5 PRIVATE).
//
// The one layer where HDF5 return codes become sluice::CacheError. Every HDF5 id lives in a RAII
// handle of its kind; every C call goes through check(), whose message names the call, the file
// and the object, and carries the useful part of HDF5's error stack (HDF5's own printing of that
// stack to stderr is switched off once, in lock()). Handle destructors close and log a failure;
// they never throw.
//
// Thread-safety: the serial HDF5 build is not thread-safe (and its error stack is global), so every
// public entry point of sluice_cache that touches HDF5 holds lock() for its whole duration. The
// lock is process-wide and recursive: entry points may nest. Handles take it when they close.
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cache::h5 {

// The process-wide HDF5 lock. The first call in each thread turns off HDF5's automatic error
// printing for that thread (HDF5's error stacks are per thread); the first call in the process
// also keeps HDF5 from cleaning up at exit (see the definition for why).
std::unique_lock<std::recursive_mutex> lock();

// Where a call happened, for messages: a file and an object in it ("/mel", "attribute shard").
struct Where {
  std::string file;
  std::string object;

  std::string describe() const { return object.empty() ? file : file + " (" + object + ")"; }
  Where with(const std::string& other_object) const { return {file, other_object}; }
};

// The useful part of HDF5's current error stack, innermost cause first ("H5Z_filter_fletcher32():
// data error detected by Fletcher32 checksum <- ..."); clears the stack. Empty when there is none.
std::string take_error_detail();

// The same, plus the errno of a failed system call reported by HDF5's file driver (0: none).
struct ErrorStack {
  std::string detail;
  int error_number = 0;
};
ErrorStack take_error_stack();

// Throws CacheError "HDF5 <call> failed for <file> (<object>): <detail>", or EnvironmentError
// "no space left on device: HDF5 <call> on <file> (<object>); <what to do>" when the
// file system refused (ENOSPC, EDQUOT, EROFS, EACCES, EPERM).
[[noreturn]] void fail(const char* call, const Where& where);

// Returns result when it is not negative (HDF5's error convention for herr_t, htri_t and hid_t).
template <class Result>
Result check(Result result, const char* call, const Where& where) {
  if (result < 0) fail(call, where);
  return result;
}

// Logs a failed close (used by destructors; never throws).
void log_close_failure(const char* kind, hid_t id) noexcept;
// Logs, at debug level, the failed close of an object given up after an error (never throws).
void log_abandoned_close(const char* kind, const std::string& detail) noexcept;

struct FileKind {
  static constexpr const char* name = "file";
  static constexpr const char* close_call = "H5Fclose";
  static herr_t close(hid_t id) { return H5Fclose(id); }
};
struct DatasetKind {
  static constexpr const char* name = "dataset";
  static constexpr const char* close_call = "H5Dclose";
  static herr_t close(hid_t id) { return H5Dclose(id); }
};
struct DataspaceKind {
  static constexpr const char* name = "dataspace";
  static constexpr const char* close_call = "H5Sclose";
  static herr_t close(hid_t id) { return H5Sclose(id); }
};
struct DatatypeKind {
  static constexpr const char* name = "datatype";
  static constexpr const char* close_call = "H5Tclose";
  static herr_t close(hid_t id) { return H5Tclose(id); }
};
struct PropertyListKind {
  static constexpr const char* name = "property list";
  static constexpr const char* close_call = "H5Pclose";
  static herr_t close(hid_t id) { return H5Pclose(id); }
};
struct AttributeKind {
  static constexpr const char* name = "attribute";
  static constexpr const char* close_call = "H5Aclose";
  static herr_t close(hid_t id) { return H5Aclose(id); }
};

// Owns one HDF5 id of one kind. Move-only.
template <class Kind>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }

  // Closes now; a failure is logged, as in the destructor.
  void reset() noexcept {
    if (id_ < 0) return;
    hid_t id = std::exchange(id_, H5I_INVALID_HID);
    try {
      auto held = lock();
      if (Kind::close(id) < 0) {
        take_error_detail();
        log_close_failure(Kind::name, id);
      }
    } catch (...) {
      log_close_failure(Kind::name, id);
    }
  }

  // Closes now after a failure already reported (a write that failed, e.g. on a full disk): a
  // failing close is expected then and only logged at debug level. Never throws.
  void abandon() noexcept {
    if (id_ < 0) return;
    hid_t id = std::exchange(id_, H5I_INVALID_HID);
    try {
      auto held = lock();
      if (Kind::close(id) < 0) log_abandoned_close(Kind::name, take_error_detail());
    } catch (...) {
    }
  }

  // Closes now and throws on failure: for closes whose success matters (a file being committed).
  void close(const Where& where) {
    if (id_ < 0) return;
    hid_t id = std::exchange(id_, H5I_INVALID_HID);
    check(Kind::close(id), Kind::close_call, where);
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<FileKind>;
using Dataset = Handle<DatasetKind>;
using Dataspace = Handle<DataspaceKind>;
using Datatype = Handle<DatatypeKind>;
using PropertyList = Handle<PropertyListKind>;
using Attribute = Handle<AttributeKind>;

// ---- files -------------------------------------------------------------------------------------
// Creates (truncating) a file for writing. alignment > 0: objects of 1 KiB or more (chunks) start
// at a multiple of `alignment` bytes in the file.
File create_file(const std::string& path, uint64_t alignment = 0);
// Opens a file read-only.
File open_file(const std::string& path);
bool has_link(hid_t location, const std::string& name, const Where& where);

// ---- datasets ----------------------------------------------------------------------------------
// A dataset chunked along dimension 0 only (dims[1..] are whole in each chunk), unlimited in
// dimension 0, with the fletcher32 filter on every chunk (after deflate when gzip_level > 0).
// Variable-length types get no filters: HDF5 (>= 1.10.7) refuses them.
Dataset create_chunked(hid_t file, const std::string& name, hid_t file_type,
                       const std::vector<hsize_t>& dims, hsize_t chunk_rows, int gzip_level,
                       const Where& where);
// chunk_cache_bytes < 0 keeps HDF5's default chunk cache (1 MiB per dataset).
Dataset open_dataset(hid_t file, const std::string& name, const Where& where,
                     int64_t chunk_cache_bytes = -1);
std::vector<hsize_t> extent(const Dataset& dataset, const Where& where);
std::vector<hsize_t> chunk_shape(const Dataset& dataset, const Where& where);
// True when every chunk of the dataset goes through the fletcher32 filter.
bool has_fletcher32(const Dataset& dataset, const Where& where);
void set_extent(const Dataset& dataset, const std::vector<hsize_t>& dims, const Where& where);
// The class of the dataset's stored type (H5T_FLOAT, H5T_INTEGER, H5T_STRING, ...).
H5T_class_t type_class(const Dataset& dataset, const Where& where);

// Rows [first, first + count) along dimension 0 (all of the other dimensions), from/to a dense
// buffer in memory of mem_type.
void write_rows(const Dataset& dataset, hid_t mem_type, hsize_t first, hsize_t count,
                const void* data, const Where& where);
void read_rows(const Dataset& dataset, hid_t mem_type, hsize_t first, hsize_t count, void* data,
               const Where& where);

// Variable-length UTF-8 strings.
Datatype utf8_string_type();
void write_string_rows(const Dataset& dataset, hsize_t first, const std::vector<std::string>& rows,
                       const Where& where);
std::vector<std::string> read_string_rows(const Dataset& dataset, hsize_t first, hsize_t count,
                                          const Where& where);

// The filters of a dataset's pipeline, in order (H5Z_FILTER_FLETCHER32, H5Z_FILTER_DEFLATE, ...).
std::vector<H5Z_filter_t> filters(const Dataset& dataset, const Where& where);
// IEEE 754 binary16, little-endian: HDF5 1.10 has no predefined one; this is the type h5py
// makes for numpy's float16 (and reads back as float16). Created once, never closed; call under
// h5::lock() like every HDF5 call.
hid_t ieee_f16le();
// Whether the dataset's stored element type equals `type` (e.g. H5T_IEEE_F32LE).
bool stored_type_is(const Dataset& dataset, hid_t type, const Where& where);

// Writes the dataset's cached chunks to the file (H5Dflush), so that they have file addresses.
void flush(const Dataset& dataset, const Where& where);

// Where the chunk whose first element is at `offset` is stored: its byte address in the file, its
// stored size and its skipped-filter mask (0: every filter was applied). Throws when the chunk
// was never written. Costly: in HDF5 1.10 (H5Dget_chunk_info_by_coord) every call walks the whole
// chunk index, ~20 us for a 4000-chunk dataset (measured); not for the read path.
struct ChunkPlace {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint32_t filter_mask = 0;
};
ChunkPlace chunk_place(const Dataset& dataset, const hsize_t* offset, const Where& where);

// Direct chunk read (H5Dread_chunk): the stored bytes of the chunk whose first element is at
// `offset`, with no filter applied (with fletcher32 alone: the data, then its 4-byte checksum).
// The stored size is checked against `capacity` first (H5Dget_chunk_storage_size), so a damaged
// chunk index cannot overrun the buffer. Returns the stored size; `filter_mask` gets the chunk's
// skipped-filter mask (0: every filter was applied).
size_t read_raw_chunk(const Dataset& dataset, const hsize_t* offset, void* buffer, size_t capacity,
                      uint32_t& filter_mask, const Where& where);

// Direct chunk write (H5Dwrite_chunk): stores `bytes` as the chunk whose first element is at
// `offset`, bypassing the filter pipeline and the chunk cache; filter_mask 0 says every filter was
// applied, so the bytes must be what the pipeline would have produced (with fletcher32 alone: the
// chunk's data, then its checksum little-endian). The dataset's extent must already cover the chunk.
void write_raw_chunk(const Dataset& dataset, const hsize_t* offset, uint32_t filter_mask,
                     const void* bytes, size_t size, const Where& where);

// Fletcher-32 exactly as HDF5's fletcher32 filter computes it (H5_checksum_fletcher32: big-endian
// 16-bit words, folded every 360 words), but ~4x faster (vectorisable). The filter stores it
// little-endian after the chunk's data.
uint32_t fletcher32(const void* data, size_t bytes);

// ---- attributes (on any object: here, a file's root group) -------------------------------------
void write_attribute(hid_t object, const std::string& name, const std::string& value,
                     const Where& where);
void write_attribute(hid_t object, const std::string& name, int64_t value, const Where& where);
bool has_attribute(hid_t object, const std::string& name, const Where& where);
// Reads a string attribute stored as variable- or fixed-length string.
std::string read_string_attribute(hid_t object, const std::string& name, const Where& where);
int64_t read_int_attribute(hid_t object, const std::string& name, const Where& where);

}  // namespace sluice::cache::h5
