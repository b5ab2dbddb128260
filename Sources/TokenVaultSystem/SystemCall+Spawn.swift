// Owns: starting a helper program and forgetting it (the browser for a login), with its output
// discarded and the child reaped on a thread of its own.
internal import Glibc

extension SystemCall {
    /// Starts `arguments[0]` (looked up on PATH) with the rest as its arguments, this process's
    /// environment, standard input from and output to `/dev/null`. Returns whether it started;
    /// the child is waited for on a thread of its own, so it leaves no zombie.
    package static func spawnQuietly(_ arguments: [String]) -> Bool {
        guard !arguments.isEmpty else { return false }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] {
            posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child = pid_t()
        guard posix_spawnp(&child, arguments[0], &actions, nil, argv, environ) == 0 else { return false }
        let started = child
        startThread(name: "reap-\(started)", stackSize: 64 * 1024) {
            var status: Int32 = 0
            while waitpid(started, &status, 0) < 0 && errno == EINTR {}
        }
        return true
    }
}
