/*
 * TokenVault: the refresh single flight, as built, with faults at every step.
 *
 * Callers on several hosts and processes refresh one entry whose access token has expired. Each
 * caller reads the entry, joins its process's flight or starts one, takes the lock (bounded wait),
 * reads the entry again, and only if it is still stale presents the refresh token to the token
 * endpoint, writes the answer (a rotated token, or a "rejected" verdict) and commits.
 * The server rotates refresh tokens and revokes the whole family when an old one comes back.
 *
 * Models/README.md maps every step to the code, lists what is abstracted away, and says which
 * run of Scripts/check-model checks what.
 *
 * The shape of the model is chosen when it is compiled (spin -a -D...):
 *   LOCAL          the file vault / Secret Service variant: a per-key flock, a durable save, then
 *                  unlock. Default: the PostgreSQL variant (BEGIN, SET LOCAL lock_timeout,
 *                  pg_advisory_xact_lock, SELECT, POST, UPDATE, COMMIT).
 *   NPROC          processes (3 or 4). Process 0 runs two tasks that share one flight (JOINER=0:
 *                  one); every other process runs one. Processes 0 and 1 share host 0, process 2
 *                  is on host 1, process 3 on host 2. LOCAL puts them all on one host.
 *   EXPIRE         the new access token may expire once more during the run (a second rotation).
 *   MAXFAULTS      how many faults one run may have in all (1).
 *   ATTEMPTS       requests per refresh: TokenEndpointClient sends a refresh grant again after a
 *                  time-out or a lost connection (maximumAttempts, 3 by default; 2 here).
 * The knobs of one run are read from the environment when the verifier starts (TV_CRASH=16 ./pan):
 *   TV_CRASH, TV_DROP, TV_STALL   bit masks of the steps (F_* below) after which a process may be
 *                  killed (kill -9), its database connection may be ended (a restart of the
 *                  database, see below; PostgreSQL only), or its host may freeze for good with the
 *                  lock held.
 *   TV_LOSTREPLY   the token endpoint's answer may be lost (time-out, connection reset) after the
 *                  server has acted on the request.
 *   TV_WRITEFAIL   the write of the answer may fail (disk full, UPDATE error).
 *   TV_NETFAIL     the request may fail before it reaches the server (connection refused).
 *   TV_REVOKE      the server may answer invalid_grant to a current refresh token (the user
 *                  revoked the grant), so the "rejected" verdict is exercised.
 *   TV_TIMEOUT     0 takes away the bounded wait (lock_timeout / RefreshLock's deadline); 1 unless set.
 *   TV_INORDER     a killed process's request that is still on its way reaches the server before any
 *                  request sent after the kill (otherwise the server takes requests in any order, so
 *                  a dead refresher's request may arrive after the re-presentation of its token).
 *   TV_GRACE       the server has a reuse interval (Auth0's overlap period, Okta's grace period,
 *                  Keycloak's max reuse, Hydra's grace period; the test server's reuse_interval):
 *                  a refresh token it has rotated is accepted again within the interval, answered
 *                  with new tokens of the same family. The model has no clock: a run is taken to
 *                  be shorter than the interval (10 s in the tests), so every spent token of the
 *                  run is accepted again.
 *   TV_CLAIM       the claim asserted when the run is over: 0 CLAIM_SAFE, 1 CLAIM_WINDOW,
 *                  2 CLAIM_ONCE, 3 CLAIM_NONE, 4 CLAIM_GRACE, 5 CLAIM_STRICT (defined next to LOST
 *                  below).
 *   Mutations that must break a property, so that the properties are not vacuous:
 *   TV_NOLOCK (no lock at all), TV_LOCK_PER_HOST (a flock per host, the protocol before issue 16,
 *   used across hosts), TV_NOVERDICT (a rejection is not stored), TV_NORELEASE (a dead holder
 *   keeps the lock), TV_NOREREAD (the entry is not read again under the lock), TV_NOJOURNAL (local:
 *   no "refresh token N is being presented" record before the request, issue 33), TV_NOREPLAY
 *   (PostgreSQL: a flight whose connection died throws its answer away instead of committing it
 *   on a new connection), TV_NOWAITCUT (PostgreSQL: a flight that finds the journal of a flight
 *   cut off by a restart presents its refresh token again at once instead of waiting for it).
 *
 * PostgreSQL, a dropped connection (TV_DROP) is taken to be a restart of the database: it ends
 * the holder's session, transaction and lock while the holder goes on. The holder commits its
 * answer again on a new connection, under the lock, fenced by the row's version
 * (PostgresStore.replay); the next lock holder that finds the journal of such a flight, written
 * before the server's last start (pg_postmaster_start_time), waits outside the lock until that
 * flight is over (PostgresStore.flightCutOffByRestart). The code tells a restart apart by the
 * server's start time; a single ended backend (pg_terminate_backend) and a failover are not told
 * apart from a holder that died, and are not what TV_DROP checks here.
 *
 * The journal (issue 33, local variant; the file vault's `RefreshPresenting`): before the request
 * leaves, the entry durably records the refresh token being presented; the save of the answer (or
 * of the verdict) clears it. A flight that finds the record under the lock presents that refresh
 * token again at once, whatever the token's freshness; if the server refuses it, the verdict is
 * stored as an interrupted one ("Interrupted refresh: log in again").
 */

#ifndef NPROC
#define NPROC 3
#endif
#ifndef JOINER
#define JOINER 1
#endif
#define NTASK (NPROC + 1)
#ifndef MAXFAULTS
#define MAXFAULTS 1
#endif
#ifndef ATTEMPTS
#define ATTEMPTS 2
#endif
/* The knobs a run turns are read from the environment when the verifier starts (TV_CRASH=16
 * ./pan), so that one compiled verifier serves many runs. They are hidden: constant for a run,
 * and not part of the state. */
c_code {
\#include <stdlib.h>
static int knob(const char *name, int otherwise) {
  const char *value = getenv(name);
  return value && *value ? atoi(value) : otherwise;
}
};
hidden byte k_crash, k_drop, k_stall, k_lostreply, k_writefail, k_netfail, k_revoke, k_timeout;
hidden byte k_claim, k_nolock, k_perhost, k_noverdict, k_norelease, k_noreread, k_grace, k_nojournal, k_inorder;
hidden byte k_noreplay, k_nowaitcut;
#define CRASH     k_crash       /* TV_CRASH */
#define DROP      k_drop        /* TV_DROP */
#define STALL     k_stall       /* TV_STALL */
#define LOSTREPLY k_lostreply   /* TV_LOSTREPLY */
#define WRITEFAIL k_writefail   /* TV_WRITEFAIL */
#define NETFAIL   k_netfail     /* TV_NETFAIL */
#define REVOKE    k_revoke      /* TV_REVOKE */
#define TIMEOUT   k_timeout     /* TV_TIMEOUT, 1 unless set */
#define NOLOCK    k_nolock      /* TV_NOLOCK */
#define PERHOST   k_perhost     /* TV_LOCK_PER_HOST */
#define NOVERDICT k_noverdict   /* TV_NOVERDICT */
#define NORELEASE k_norelease   /* TV_NORELEASE */
#define NOREREAD  k_noreread    /* TV_NOREREAD */
#define GRACE     k_grace       /* TV_GRACE */
#define INORDER   k_inorder     /* TV_INORDER */
#define NOREPLAY  k_noreplay    /* TV_NOREPLAY */
#define NOWAITCUT k_nowaitcut   /* TV_NOWAITCUT */
/* TV_NOJOURNAL turns it off. PostgreSQL commits the record on a connection of its own, fenced by
 * the row's version and by pg_locks showing that the flight's backend still holds the lock (a
 * record in the flight's own transaction would vanish with it). */
#define JOURNAL   (!k_nojournal)
#ifndef EXPIRE
#define EXPIRE 0
#endif

/* Steps of one caller; a fault may strike after each. */
#define F_PRE     1    /* started, nothing read yet */
#define F_WAIT    2    /* joined no flight; about to wait for the lock */
#define F_LOCKED  4    /* holds the lock; has not read the entry again */
#define F_READ    8    /* read the entry under the lock: stale, not rejected; request not sent */
#define F_SENT    16   /* request sent; no answer yet */
#define F_ANSWER  32   /* answer received; nothing written */
#define F_WRITTEN 64   /* PostgreSQL: UPDATE done, not committed. Local: saved (durably), still locked */
#define F_DONE    128  /* committed / unlocked; the flight has not landed */
#define F_ALL     255

/* The window: faults at these steps are the only ones allowed to present a refresh token twice
 * or lose a rotated one (the "window" runs check exactly that; the "cex-*" runs show that
 * each of them really can). A crash after the request has left may still let the server act on
 * it. A lost database connection ends the transaction and the advisory lock at once, but the
 * caller notices only at its next statement, and between the re-read and the UPDATE it makes none. */
#ifdef LOCAL
#define WINDOW_CRASH (F_SENT | F_ANSWER)
#else
#define WINDOW_CRASH (F_SENT | F_ANSWER | F_WRITTEN)
#endif
#define WINDOW_DROP (F_READ | F_SENT | F_ANSWER | F_WRITTEN)

/* Answers of the token endpoint. */
#define A_OK      1   /* a new access token and a rotated refresh token */
#define A_INVALID 2   /* invalid_grant */
#define A_NET     3   /* no answer: time-out or lost connection */

/* What a task ended with. */
#define T_RUN     0
#define T_OK      1   /* a fresh token */
#define T_FAIL    2   /* a clear error: timeout, reauthenticationRequired, networkFailure, database error */
#define T_DEAD    3   /* its process was killed */
#define T_STALLED 4   /* its host froze */

#define MAXGEN 8

/* ---- the database row (committed state; the file entry in the local variant) ---- */
byte db_rt = 1;       /* the refresh token it holds (tokens are numbered in the order issued) */
bit db_fresh = 0;     /* its access token is still valid: the run starts with an expired one */
byte db_verdict = 0;  /* the refresh token the server rejected, stored with the entry (0: none) */
bit db_vint = 0;      /* that verdict followed an interrupted refresh (the message says so) */
byte db_presenting = 0; /* the journal: the refresh token being presented (0: none) */
byte db_ver = 0;      /* PostgreSQL: the row's version, raised by every write */
byte db_jwriter = 0;  /* PostgreSQL: the process that wrote the journal, + 1 */
bit cut_live = 0;     /* PostgreSQL: the journal's writer lost its lock to a restart and its flight goes on */

/* ---- the lock: pg_advisory_xact_lock on the entry's keyed hash, or the per-key flock ---- */
byte lock[3];         /* owner + 1, or 0; only lock[0] unless TV_LOCK_PER_HOST */
#define LOCK lock[(PERHOST -> HOST(p) : 0)]
#ifdef LOCAL
#define HOST(q) 0
#else
#define HOST(q) ((q) < 2 -> 0 : (q) - 1)
#endif

/* ---- the token endpoint (authorization server) ---- */
byte cur = 1;               /* the refresh token it accepts now */
bit revoked = 0;            /* the family is revoked: every refresh token of the grant is dead */
bit user_revoked = 0;
bit presented[MAXGEN];      /* ghost: refresh tokens the server has seen */
chan reqc[NPROC] = [1] of { byte };        /* one HTTP request in flight per process */
chan repc[NPROC] = [1] of { byte, byte };  /* its answer: A_*, new refresh token */

/* ---- processes: in-process single flight (RefreshCoordinator) ---- */
bit flying[NPROC];          /* a flight is under way */
byte landed[NPROC];         /* flights landed so far */
byte flres[NPROC];          /* the last landed flight's result (T_OK or T_FAIL) */
bit pdead[NPROC];
bit stalled[NPROC];
byte tstate[NTASK];

/* ---- ghosts for the properties ---- */
bit twice = 0;              /* some refresh token reached the server twice */
bit expired = 0;            /* the clock expired the access token a second time */
bit wfault = 0;             /* a fault struck inside the window */
/* The inherent window of issue 33: the server acted on the request of a refresher that died
 * before it could save the answer (killed after the rotation, or the request reached the server
 * after its death). */
bit wrot = 0;
bit rotated_for[NPROC];     /* the server rotated for this process's request, not saved yet */
byte faults = 0;
/* A rotated refresh token is lost when the token the server accepts now is not the one the vault
 * holds: nobody can present it any more (only the caller it was sent to ever had it). */
#define LOST (cur != db_rt)

/* One refresh per expiry: the server rotated at most once for the first expiry and once for
 * the clock's second one, whatever the faults. */
#define ONE_PER_EXPIRY (cur <= 2 + expired)

/* The grant is alive: the next caller can refresh with what the vault holds (the current token,
 * or, within a reuse interval, one the server rotated). */
#define NEXT_OK (!revoked && (db_rt == cur || (GRACE && db_rt < cur)))
/* The entry says that the grant was lost with a dead refresher: it still holds the presenting
 * record (the next caller presents it again and is refused: "Interrupted refresh"), or it holds
 * that interrupted verdict already. */
#define REPORTED ((db_presenting != 0 && db_presenting == db_rt) || (db_verdict != 0 && db_verdict == db_rt && db_vint))

/* The claims a run may assert at its end (TV_CLAIM). */
#define CLAIM_SAFE   (ONE_PER_EXPIRY && !twice && !LOST)            /* one refresh, never twice, never lost */
#define CLAIM_WINDOW (ONE_PER_EXPIRY && (!twice && !LOST || wfault)) /* ... unless a window fault */
#define CLAIM_ONCE   (!twice)                        /* never presented twice */
#define CLAIM_NONE   1                               /* liveness runs: SETTLED alone */
/* Issue 33, with a reuse interval: whatever is killed when, the grant lives. */
#define CLAIM_GRACE  (NEXT_OK)
/* Issue 33, strict rotation: the grant is lost only by a kill inside the inherent window (the
 * server acted on the request of a refresher that died before saving the answer). */
#define CLAIM_STRICT (NEXT_OK || wrot)
/* ... and then the entry says so: the next call answers "Interrupted refresh: log in again". */
#define CLAIM_REPORTED (NEXT_OK || (wrot && REPORTED))
/* TV_CLAIM: 0 CLAIM_SAFE, 1 CLAIM_WINDOW, 2 CLAIM_ONCE, 3 CLAIM_NONE, 4 CLAIM_GRACE, 5 CLAIM_STRICT,
 * 6 CLAIM_REPORTED */
#define CLAIM (k_claim == 0 -> CLAIM_SAFE : (k_claim == 1 -> CLAIM_WINDOW : (k_claim == 2 -> CLAIM_ONCE : \
  (k_claim == 4 -> CLAIM_GRACE : (k_claim == 5 -> CLAIM_STRICT : (k_claim == 6 -> CLAIM_REPORTED : CLAIM_NONE))))))

#define SETTLED_3 (tstate[0] != T_RUN && tstate[1] != T_RUN && tstate[2] != T_RUN && tstate[3] != T_RUN)
#if NPROC == 4
#define SETTLED (SETTLED_3 && tstate[4] != T_RUN)
#else
#define SETTLED SETTLED_3
#endif

/* The flight of process p is over (landed, killed or frozen for good; a frozen one is waited for
 * only until its time is over, which the model does not count): nobody waits for it. */
inline cut_over() {
  if :: cut_live && db_jwriter == p + 1 -> cut_live = 0 :: else -> skip fi
}

inline release_if_held() {
  if
  :: LOCK == p + 1 -> LOCK = 0
  :: else -> skip
  fi
}

/* A fault after step s, or none. A killed process loses its lock (the kernel closes the flock's
 * descriptor; PostgreSQL ends the backend, rolls back and drops the advisory lock) and every task
 * of it stops (the `unless` below). A dropped connection loses the lock and the transaction; the
 * process goes on. A frozen host keeps its connection, and so the lock. */
inline fault(s) {
  if
  :: atomic {
       (CRASH & (s)) && faults < MAXFAULTS ->
       faults++;
       if :: (WINDOW_CRASH & (s)) -> wfault = 1 :: else -> skip fi;
       printf("P%d killed (step %d)\n", p, s);
       if :: rotated_for[p] -> wrot = 1 :: else -> skip fi;
       if :: !NORELEASE -> release_if_held() :: else -> skip fi;
       pend = 0;
       cut_over();
       pdead[p] = 1     /* last: the `unless` of every task of p takes over from here */
     }
#ifndef LOCAL
  :: atomic {
       (DROP & (s)) && !conn_dead && faults < MAXFAULTS ->
       faults++;
       if :: (WINDOW_DROP & (s)) -> wfault = 1 :: else -> skip fi;
       printf("P%d: its database connection dies (step %d): lock and transaction gone\n", p, s);
       conn_dead = 1;
       release_if_held();
       pend = 0;
       if :: db_presenting != 0 && db_jwriter == p + 1 -> cut_live = 1 :: else -> skip fi
     }
#endif
  :: atomic { (STALL & (s)) && faults < MAXFAULTS -> faults++; printf("P%d's host freezes (step %d)\n", p, s); stalled[p] = 1; cut_over() }
  :: skip
  fi
}

/* One caller (a task). Each step is one atomic action on shared state (a read, the lock, the
 * request, the answer, the write, the commit) together with the local decisions after it and the
 * fault that may strike right after it. */
proctype task(byte t; byte p) {
  byte rt, ans, newrt, g, res, attempt, myver;
  bit conn_dead, pend, pend_fresh, pend_vint, interrupted;
  byte pend_rt, pend_verdict;
  {
    /* A process dies or freezes at the steps of its flight; here only one that has none. */
    atomic { !flying[p] -> fault(F_PRE) }
    atomic {
      /* Vault.freshToken: read the entry; a token that is still fresh costs no lock */
      if
      :: db_fresh -> res = T_OK; goto finish
      :: else -> skip
      fi;
      /* RefreshCoordinator.run: join the flight under way, or start one */
      if
      :: flying[p] -> g = landed[p]; goto join
      :: else -> flying[p] = 1
      fi;
      fault(F_WAIT)
    }
    /* the flight (refreshUnderLock). PostgreSQL: BEGIN, SET LOCAL lock_timeout, then
     * pg_advisory_xact_lock; local: RefreshLock.acquire(path:timeout:) */
takelock:
    do
    :: atomic { NOLOCK -> fault(F_LOCKED) }; break
    :: atomic { !NOLOCK && !conn_dead && LOCK == 0 -> LOCK = p + 1; printf("P%d takes the lock\n", p); fault(F_LOCKED) }; break
    :: atomic { !NOLOCK && conn_dead -> res = T_FAIL }; goto failed
    :: atomic { !NOLOCK && TIMEOUT && LOCK != 0 -> res = T_FAIL; printf("P%d stops waiting: timeout\n", p) }; goto failed   /* lock_timeout / the deadline */
    od;
    /* read the entry again, under the lock */
    atomic {
      if :: conn_dead -> goto failed :: else -> skip fi;
      rt = db_rt;
      /* the journal: an earlier flight presented rt and died before saving the answer */
      interrupted = (JOURNAL && db_presenting != 0 && db_presenting == rt);
      printf("P%d reads again: refresh token %d (fresh %d, rejected %d, interrupted %d)\n", p, rt, db_fresh, db_verdict == rt, interrupted);
#ifndef LOCAL
      /* The journal of a flight a restart cut off from its lock, still going: ROLLBACK, wait
       * outside the lock for it to end (its answer is committed under this lock), start again. */
      if
      :: interrupted && cut_live && !NOWAITCUT ->
         release_if_held(); printf("P%d waits for the flight a restart cut off\n", p); goto waitcut
      :: else -> skip
      fi;
#endif
      if
      :: !NOREREAD && db_fresh && !interrupted -> res = T_OK; goto commit      /* another caller refreshed it */
      :: !NOVERDICT && !db_fresh && db_verdict == rt -> res = T_FAIL; goto commit   /* rejected before: log in again */
      :: else -> skip
      fi;
#ifndef LOCAL
      /* PostgreSQL: the journal is committed here, before the request is built. Its fence is the
       * read just above in this step: a holder whose connection died (and lost the lock) fails
       * there and never writes a record. A connection that dies after it (a drop at F_READ) goes
       * unnoticed until the UPDATE, so its request still leaves. */
      if :: JOURNAL -> db_presenting = rt; db_ver++; db_jwriter = p + 1 :: else -> skip fi;
      myver = db_ver;
#endif
      fault(F_READ);
      attempt = 1
    }
    /* TokenEndpointClient.refresh: POST grant_type=refresh_token; sent again after a time-out or
     * a lost connection, up to ATTEMPTS requests in all */
send:
    atomic {
      if
      :: atomic { NETFAIL && faults < MAXFAULTS -> faults++; printf("P%d: connection refused\n", p) }; goto retry   /* refused: the server saw nothing */
      :: skip
      fi;
#ifdef LOCAL
      if
      :: JOURNAL -> db_presenting = rt          /* durable before the request leaves */
      :: else -> skip
      fi;
#endif
      reqc[p] ! rt;
      printf("P%d presents refresh token %d\n", p, rt);
      fault(F_SENT)
    }
    atomic {
      repc[p] ? ans, newrt;
      fault(F_ANSWER);
      if
      :: ans == A_NET -> goto retry
      :: else -> skip
      fi;
      if
      :: atomic { WRITEFAIL && faults < MAXFAULTS -> faults++; wfault = 1; printf("P%d: the write fails\n", p) }; goto failed
      :: skip
      fi
    }
    atomic {
#ifdef LOCAL
      /* store.save (EncryptedFileStore: written and fsynced before it returns) */
      if
      :: ans == A_OK -> db_rt = newrt; db_fresh = 1; db_verdict = 0; db_vint = 0; res = T_OK
      :: ans == A_INVALID ->
         if :: !NOVERDICT -> db_verdict = rt; db_vint = interrupted :: else -> skip fi;   /* storeVerdict */
         res = T_FAIL
      fi;
      db_presenting = 0;
      rotated_for[p] = 0;
      printf("P%d saves: refresh token %d (rejected %d)\n", p, db_rt, db_verdict == db_rt);
#else
      /* UPDATE the row, inside the transaction; after a lost connection, on a new one */
      if
      :: conn_dead && !NOREPLAY -> goto replay
      :: conn_dead && NOREPLAY -> goto failed
      :: else -> skip
      fi;
      pend = 1;
      if
      :: ans == A_OK -> pend_rt = newrt; pend_fresh = 1; pend_verdict = 0; res = T_OK
      :: ans == A_INVALID ->
         pend_rt = rt; pend_fresh = 0; res = T_FAIL;
         pend_verdict = (NOVERDICT -> db_verdict : rt); pend_vint = (NOVERDICT -> db_vint : interrupted)
      fi;
#endif
      fault(F_WRITTEN)
    }
commit:
    atomic {
#ifdef LOCAL
      release_if_held();                           /* lock?.release() (defer) */
#else
      /* COMMIT: the row and the release of the advisory lock, at once; a transaction lost with
       * its connection is written again on a new one (an answer is never thrown away) */
      if
      :: conn_dead && ans != 0 && !NOREPLAY -> goto replay
      :: conn_dead && (ans == 0 || NOREPLAY) -> goto failed
      :: else -> skip
      fi;
      if
      :: pend -> db_rt = pend_rt; db_fresh = pend_fresh; db_verdict = pend_verdict; db_vint = pend_vint; db_presenting = 0; db_ver++;
         pend = 0; rotated_for[p] = 0;
         printf("P%d commits: refresh token %d (rejected %d)\n", p, db_rt, db_verdict == db_rt)
      :: else -> skip
      fi;
      release_if_held();
#endif
      ans = 0; newrt = 0; pend_rt = 0; pend_fresh = 0; pend_verdict = 0; pend_vint = 0; attempt = 0;
      fault(F_DONE)
    }
land:
    atomic {
      cut_over();
      flying[p] = 0; flres[p] = res; landed[p]++;
finish:
      tstate[t] = res;
      goto out
    }
retry:
    if
    :: attempt < ATTEMPTS -> attempt++; goto send
    :: else -> skip                                /* networkFailure */
    fi;
failed:
    /* ROLLBACK (or a dead connection) / lock?.release(): the lock goes, nothing is written */
    atomic { release_if_held(); pend = 0; res = T_FAIL; ans = 0; newrt = 0; pend_rt = 0; pend_fresh = 0; pend_verdict = 0; pend_vint = 0; attempt = 0; printf("P%d's flight fails: rolled back, unlocked\n", p); goto land };
#ifndef LOCAL
replay:
    /* PostgresStore.replay: a new connection, BEGIN, pg_advisory_xact_lock, the write fenced by
     * the version the row had after this flight's journal, COMMIT. A row another writer changed
     * keeps that writer's token (a clear error). */
    atomic {
      LOCK == 0 ->
      if
      :: db_ver == myver ->
         if
         :: ans == A_OK -> db_rt = newrt; db_fresh = 1; db_verdict = 0; db_vint = 0; res = T_OK
         :: ans == A_INVALID ->
            if :: !NOVERDICT -> db_verdict = rt; db_vint = interrupted :: else -> skip fi;
            res = T_FAIL
         fi;
         db_presenting = 0; db_ver++; rotated_for[p] = 0;
         printf("P%d commits its answer on a new connection: refresh token %d (rejected %d)\n", p, db_rt, db_verdict == db_rt)
      :: else -> res = T_FAIL; printf("P%d: the row changed since its journal; its answer is not written\n", p)
      fi;
      pend = 0; ans = 0; newrt = 0; pend_rt = 0; pend_fresh = 0; pend_verdict = 0; pend_vint = 0; attempt = 0;
      goto land
    };
waitcut:
    atomic { !cut_live -> goto takelock };
#endif
join:
    /* every caller of one flight gets its result */
    atomic { landed[p] != g -> res = flres[p]; g = 0; goto finish };
out:
    skip
  } unless {
    if
    :: pdead[p] -> tstate[t] = T_DEAD
    :: stalled[p] -> tstate[t] = T_STALLED
    fi
  }
}

/* The token endpoint: refresh token rotation with reuse detection (RFC 6819 5.2.2.3, OAuth 2.0
 * Security BCP 4.14.2), as the test server in Tests/oauth-server does. A request still in flight
 * when its sender dies is still acted on. */
inline serve(q) {
  atomic {
    if :: pdead[q] -> wrot = 1 :: else -> skip fi;    /* a dead refresher's request */
    if
    :: presented[rt] -> twice = 1; printf("server: refresh token %d presented a second time\n", rt)
    :: else -> presented[rt] = 1
    fi;
    if
    :: revoked -> ans = A_INVALID; printf("server: %d belongs to a revoked family: invalid_grant\n", rt)
    :: !revoked && rt != cur && !GRACE -> revoked = 1; ans = A_INVALID      /* reuse: revoke the family */
       printf("server: %d is an old refresh token: family revoked, invalid_grant\n", rt)
    :: !revoked && rt != cur && GRACE -> cur++; ans = A_OK     /* reuse within the interval */
       rotated_for[q] = 1;
       printf("server: %d was rotated already, within the reuse interval: new tokens %d\n", rt, cur)
    :: !revoked && rt == cur -> cur++; ans = A_OK                 /* rotate */
       rotated_for[q] = 1;
       printf("server: refresh token %d rotated to %d\n", rt, cur)
    :: REVOKE && !revoked && rt == cur && !user_revoked -> user_revoked = 1; revoked = 1; ans = A_INVALID
       printf("server: the user revoked the grant: invalid_grant\n")
    fi;
    if
    :: LOSTREPLY && faults < MAXFAULTS -> faults++; wfault = 1; repc[q] ! A_NET, 0;
       printf("server: its answer to P%d is lost on the way\n", q)
    :: repc[q] ! ans, cur
    fi
  }
}

/* TV_INORDER: the request of process q may be taken unless a dead process's request waits. */
#define NODEADWAITS(r, q) ((q) == (r) || !pdead[r] || empty(reqc[r]))
#if NPROC == 4
#define MAYSERVE(q) (!INORDER || (NODEADWAITS(0, q) && NODEADWAITS(1, q) && NODEADWAITS(2, q) && NODEADWAITS(3, q)))
#else
#define MAYSERVE(q) (!INORDER || (NODEADWAITS(0, q) && NODEADWAITS(1, q) && NODEADWAITS(2, q)))
#endif

active proctype server() {
  byte rt, ans;
end:
  do
  :: atomic { MAYSERVE(0) && nempty(reqc[0]) -> reqc[0] ? rt; serve(0) }
  :: atomic { MAYSERVE(1) && nempty(reqc[1]) -> reqc[1] ? rt; serve(1) }
  :: atomic { MAYSERVE(2) && nempty(reqc[2]) -> reqc[2] ? rt; serve(2) }
#if NPROC == 4
  :: atomic { MAYSERVE(3) && nempty(reqc[3]) -> reqc[3] ? rt; serve(3) }
#endif
  od
}

/* Time: the access token just stored may expire once more. */
active proctype clock() {
#if EXPIRE
end:
  db_fresh == 1 -> db_fresh = 0; expired = 1
#else
  skip
#endif
}

/* When nothing can move any more, every task has finished (a token or a clear error), died or
 * frozen with its host, and the claim of this run holds. */
active proctype monitor() {
  timeout -> assert(SETTLED); assert(CLAIM)
}

init {
  c_code {
    k_crash = knob("TV_CRASH", 0); k_drop = knob("TV_DROP", 0); k_stall = knob("TV_STALL", 0);
    k_lostreply = knob("TV_LOSTREPLY", 0); k_writefail = knob("TV_WRITEFAIL", 0);
    k_netfail = knob("TV_NETFAIL", 0); k_revoke = knob("TV_REVOKE", 0); k_timeout = knob("TV_TIMEOUT", 1);
    k_claim = knob("TV_CLAIM", 0); k_nolock = knob("TV_NOLOCK", 0); k_perhost = knob("TV_LOCK_PER_HOST", 0);
    k_noverdict = knob("TV_NOVERDICT", 0); k_norelease = knob("TV_NORELEASE", 0);
    k_noreread = knob("TV_NOREREAD", 0); k_grace = knob("TV_GRACE", 0); k_nojournal = knob("TV_NOJOURNAL", 0);
    k_inorder = knob("TV_INORDER", 0); k_noreplay = knob("TV_NOREPLAY", 0); k_nowaitcut = knob("TV_NOWAITCUT", 0);
  };
  atomic {
    run task(0, 0);
#if JOINER
    run task(1, 0);
#else
    tstate[1] = T_OK;    /* no second task in process 0 */
#endif
    run task(2, 1);
    run task(3, 2);
#if NPROC == 4
    run task(4, 3);
#endif
  }
}

/* Liveness: every caller finishes or fails, with weak fairness (pan -a -f -N settles). */
ltl settles { <> SETTLED }
