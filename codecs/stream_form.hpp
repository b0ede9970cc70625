// A codec's stream form: the steps of a compressed collective a device codec queues on a
// device stream, the host never waiting, for codecs whose codes add exactly in the code domain
// (lanes widening with the contributions) under scales agreed as a maximum of 32-bit words
// over the ranks. The stream-ordered schedules (collectives/stream_ring.cc) drive it through
// this interface; the device codecs implement it (device_codecs/), one per codec that can, so
// a codec with a stream form gets the stream-ordered calls, the NCCL interposer and CUDA-graph
// capture without a schedule of its own. Every buffer named here is device memory; every step
// is queued on the stream the form was made for.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::codec {

/// Device memory a stream-ordered call works in, kept from call to call: slot `slot`, `bytes`
/// at least (a slot's earlier contents are not kept when it grows).
class StreamSpace {
 public:
  /// The slots: the agreed words, this rank's codes, the ring's send and receive buffers, the
  /// chunks' full sums, the out-of-range flags, fp32 output before a 16-bit cast, what a form
  /// keeps for itself within a call (error feedback's x + e), and a reduce-scatter's input
  /// rotated segment by segment (rotate=hadamard).
  enum Slot : int {
    kWords = 0,
    kOwnCodes,
    kSend,
    kRecv,
    kSums,
    kFlags,
    kOut32,
    kFormScratch,
    kRotatedInput
  };
  static constexpr int kSlots = 9;
  virtual void* space(int slot, std::size_t bytes) = 0;

 protected:
  ~StreamSpace() = default;
};

/// One call's stream form: made for the call's input (count elements on this rank), rank,
/// seed and call number; scan() first, then any of the rest.
class StreamForm {
 public:
  virtual ~StreamForm() = default;
  /// The code width of one contribution (Stats::bits).
  virtual unsigned bits() const = 0;
  /// The words every rank contributes to the agreement (their maximum over the ranks is what
  /// encode and decode use).
  virtual std::size_t words() const = 0;
  /// Writes this rank's words() words at `words`, which then hold the agreed words (the caller
  /// runs the maximum over the ranks in place) when encode or decode run.
  virtual void scan(std::uint32_t* words) = 0;
  /// Elements a chunk's offset must be a multiple of for its codes to start on a byte of a
  /// whole encode's codes (code_bytes(offset, 1) bytes in).
  virtual std::size_t alignment() const = 0;
  /// Bytes of the codes of `count` elements summed over `contributions` ranks.
  virtual std::size_t code_bytes(std::size_t count, int contributions) const = 0;
  /// This rank's codes of elements [offset, offset + count) of its input into `out`.
  virtual void encode(std::size_t offset, std::size_t count, std::uint8_t* out) = 0;
  /// out = own (this rank's codes) + partial (a sum of `contributions` ranks' codes), `count`
  /// elements, lanes one contribution wider; a lane out of range sets *flag nonzero.
  virtual void add(const std::uint8_t* own, const std::uint8_t* partial, std::size_t count,
                   int contributions, std::uint8_t* out, std::uint32_t* flag) = 0;
  /// The sum of `contributions` ranks' codes of elements [offset, offset + count) decoded into
  /// `out` (count floats); a lane beyond its limit sets *flag nonzero.
  virtual void decode(const std::uint8_t* codes, std::size_t offset, std::size_t count,
                      int contributions, float* out, std::uint32_t* flag) = 0;
};

}  // namespace ccoll::codec
