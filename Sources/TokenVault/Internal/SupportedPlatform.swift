// Owns the one statement of which systems TokenVault builds on: Linux only (libsecret over D-Bus
// for the Secret Service, flock, fdatasync and /proc for the encrypted file). Package.swift
// declares no other platform; anywhere else the build stops here, with one clear message,
// instead of with a cascade of missing-module errors.
#if !os(Linux)
    #error("TokenVault builds on Linux only (Debian 12 or later): it needs libsecret, libsodium and Linux's file APIs.")
#endif
