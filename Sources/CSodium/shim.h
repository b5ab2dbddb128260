#ifndef TOKENVAULT_CSODIUM_SHIM_H
#define TOKENVAULT_CSODIUM_SHIM_H
#include <sodium.h>
#include <string.h>

/* XChaCha20-Poly1305 IETF, opened in two steps, for reading a vault's log: the whole ciphertext
 * is authenticated but only the first bytes of its plaintext (a record's names) are decrypted.
 * Both follow libsodium's own crypto_aead_xchacha20poly1305_ietf_decrypt_detached (HChaCha20
 * subkey, then RFC 8439's ChaCha20-Poly1305 with the nonce's last 8 bytes) through libsodium's
 * public primitives; Tests/TokenVaultTests/SodiumPrefixTests.swift checks them against it. */

/* The IETF subkey and nonce of an XChaCha20 nonce. */
static inline void tokenvault_xchacha20_ietf_subkey(
    unsigned char subkey[crypto_core_hchacha20_OUTPUTBYTES],
    unsigned char nonce2[crypto_stream_chacha20_ietf_NONCEBYTES],
    const unsigned char *npub, const unsigned char *k)
{
    crypto_core_hchacha20(subkey, npub, k, NULL);
    memset(nonce2, 0, 4);
    memcpy(nonce2 + 4, npub + crypto_core_hchacha20_INPUTBYTES, 8);
}

/* Returns 0 if `mac` authenticates `c` (clen bytes, tag excluded) and `ad` under `npub` and `k`,
 * and then writes the first `mlen` (<= clen) bytes of the plaintext to `m`; -1 otherwise, and
 * `m` is not written. */
static inline int tokenvault_xchacha20poly1305_ietf_open_prefix(
    unsigned char *m, unsigned long long mlen,
    const unsigned char *c, unsigned long long clen, const unsigned char *mac,
    const unsigned char *ad, unsigned long long adlen,
    const unsigned char *npub, const unsigned char *k)
{
    static const unsigned char pad0[16] = { 0 };
    unsigned char subkey[crypto_core_hchacha20_OUTPUTBYTES];
    unsigned char nonce2[crypto_stream_chacha20_ietf_NONCEBYTES];
    unsigned char block0[64];
    unsigned char computed[crypto_onetimeauth_poly1305_BYTES];
    unsigned char lengths[16];
    crypto_onetimeauth_poly1305_state state;
    int i, status;

    if (mlen > clen) {
        return -1;
    }
    tokenvault_xchacha20_ietf_subkey(subkey, nonce2, npub, k);
    crypto_stream_chacha20_ietf(block0, sizeof block0, nonce2, subkey);
    crypto_onetimeauth_poly1305_init(&state, block0);
    sodium_memzero(block0, sizeof block0);
    crypto_onetimeauth_poly1305_update(&state, ad, adlen);
    crypto_onetimeauth_poly1305_update(&state, pad0, (0x10 - adlen) & 0xf);
    crypto_onetimeauth_poly1305_update(&state, c, clen);
    crypto_onetimeauth_poly1305_update(&state, pad0, (0x10 - clen) & 0xf);
    for (i = 0; i < 8; i++) {
        lengths[i] = (unsigned char) (adlen >> (8 * i));
        lengths[8 + i] = (unsigned char) (clen >> (8 * i));
    }
    crypto_onetimeauth_poly1305_update(&state, lengths, sizeof lengths);
    crypto_onetimeauth_poly1305_final(&state, computed);
    sodium_memzero(&state, sizeof state);
    status = crypto_verify_16(computed, mac);
    sodium_memzero(computed, sizeof computed);
    if (status == 0 && mlen > 0) {
        crypto_stream_chacha20_ietf_xor_ic(m, c, mlen, nonce2, 1U, subkey);
    }
    sodium_memzero(subkey, sizeof subkey);
    return status == 0 ? 0 : -1;
}

/* Writes the first `mlen` bytes of the plaintext of `c` to `m`, without authenticating: only for
 * bytes that tokenvault_xchacha20poly1305_ietf_open_prefix has just accepted. */
static inline void tokenvault_xchacha20_ietf_decrypt_prefix(
    unsigned char *m, unsigned long long mlen, const unsigned char *c,
    const unsigned char *npub, const unsigned char *k)
{
    unsigned char subkey[crypto_core_hchacha20_OUTPUTBYTES];
    unsigned char nonce2[crypto_stream_chacha20_ietf_NONCEBYTES];

    tokenvault_xchacha20_ietf_subkey(subkey, nonce2, npub, k);
    crypto_stream_chacha20_ietf_xor_ic(m, c, mlen, nonce2, 1U, subkey);
    sodium_memzero(subkey, sizeof subkey);
}

#endif
