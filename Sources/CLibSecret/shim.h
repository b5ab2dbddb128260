#ifndef TOKENVAULT_CLIBSECRET_SHIM_H
#define TOKENVAULT_CLIBSECRET_SHIM_H
#include <libsecret/secret.h>
#endif
