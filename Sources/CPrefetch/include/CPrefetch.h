#ifndef TOKENVAULT_CPREFETCH_H
#define TOKENVAULT_CPREFETCH_H

/* A hint that `address` will be read soon: the CPU starts loading its cache line and goes on.
 * Swift has no spelling for it. RecordIndex uses it so that applying a batch of records to a
 * large index overlaps the cache misses of several slots (issue 17). */
static inline void tokenvault_prefetch(const void *address) {
    __builtin_prefetch(address);
}

#endif
