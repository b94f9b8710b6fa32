// streampool: the Level Zero backend (a oneAPI Level Zero device through the loader).
//
// Glossary
//   loader   libze_loader.so.1, loaded with dlopen on first use; the library never links it, so a
//            program built with streampool runs where Level Zero is absent and finds it
//            unavailable. Devices are numbered across all drivers the loader reports, in its
//            order (driver 0's devices first).
//   queue    an immediate command list on the device's first compute queue group. Commands run
//            in the order they were submitted: the backend appends a barrier between two commands
//            (the 1.4 specification lets a command list overlap commands otherwise).
//   marker   an event of a host-visible event pool owned by the backend, signalled by a barrier.
//            Events are reused, but only once every command list that waited on one has passed
//            that wait (src/backend/level_zero/event_registry.hpp states the rule).
//
// Host -> device copies from pageable memory are staged in host memory of the context
// (zeMemAllocHost), freed once the copy has completed: `submit` returns once the source has been
// copied out, as the backend contract requires.
#pragma once

#include <memory>

#include "streampool/backend.hpp"

namespace streampool {

/// True when libze_loader.so.1 loads, zeInit succeeds and at least one device exists. Never
/// throws.
[[nodiscard]] STREAMPOOL_EXPORT bool level_zero_available() noexcept;

/// The number of Level Zero devices over all drivers; 0 when Level Zero is not available.
[[nodiscard]] STREAMPOOL_EXPORT int level_zero_device_count();

/// A backend for Level Zero device `ordinal` (counted across drivers), with its own context.
/// @throws backend_error of kind unavailable ("level_zero: not available: <reason>") when the
///         loader cannot be loaded or initialised, of kind no_device ("level_zero: no device
///         <ordinal> ...") when the ordinal is out of range, of kind runtime when a Level Zero
///         call fails (naming the call, its ze_result_t and the values).
[[nodiscard]] STREAMPOOL_EXPORT std::shared_ptr<backend> make_level_zero_backend(int ordinal = 0);

}  // namespace streampool
