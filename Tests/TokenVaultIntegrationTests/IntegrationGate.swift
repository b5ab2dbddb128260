import Testing

#if !Integration
    /// Plain `swift test` starts no daemon, so the integration tests (Tests/Integration: the real
    /// gnome-keyring on a private D-Bus, the OAuth test server) are not built into its bundle; this
    /// says so, once. Scripts/test builds with `--traits Integration`, which links them in (and
    /// leaves this out), and runs every test.
    @Test(.disabled("the integration tests (Tests/Integration) need a private gnome-keyring and the OAuth test server: run Scripts/test"))
    func integrationTestsRunUnderScriptsTest() {}
#endif
