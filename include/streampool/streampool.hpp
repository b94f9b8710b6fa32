// streampool: everything, for programs that do not care to pick headers.
#pragma once

#include "streampool/array.hpp"
#include "streampool/backend.hpp"
#include "streampool/device.hpp"
#include "streampool/error.hpp"
#include "streampool/host.hpp"
#include "streampool/kernel.hpp"
#include "streampool/pool.hpp"
#include "streampool/report.hpp"
#include "streampool/snapshot.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"
