#ifndef TOKENVAULT_FUZZ_CSODIUM_SHIM_H
#define TOKENVAULT_FUZZ_CSODIUM_SHIM_H
#include <sodium.h>
#endif
