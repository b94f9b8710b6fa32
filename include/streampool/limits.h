/* streampool: the limits of the interface, shared by the C ABI, the C++ headers and (through
 * sp_max_allocation_bytes) the bindings. C11 and C++. */
#ifndef STREAMPOOL_LIMITS_H
#define STREAMPOOL_LIMITS_H

/* The largest request a pool accepts, in bytes: 2^48, beyond any device's memory. Larger requests
 * (an overflowed size computation, most often) fail as bad input, naming the size. */
#define STREAMPOOL_MAX_ALLOCATION_BYTES (((unsigned long long)1) << 48)

#endif /* STREAMPOOL_LIMITS_H */
