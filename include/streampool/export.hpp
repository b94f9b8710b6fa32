// streampool: the export macro.
//
// The library is built with hidden visibility (CMakeLists.txt): a symbol is part of its ABI only
// when its declaration says STREAMPOOL_EXPORT. Every public header that declares such a symbol
// includes this one, directly or through error.hpp.
#pragma once

#define STREAMPOOL_EXPORT __attribute__((visibility("default")))
