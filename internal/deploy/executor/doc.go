// Package executor runs the deployment runs of internal/deploy/runs
// (deployment-spec.md §3–§5): it claims a run under this process's
// instance id, plans it (the version's spec against the configuration's
// applied state), stores the plan as the run's resources before doing
// anything, then executes the steps tier by tier — at most Parallel (4) at
// once in a tier — renewing the lease between steps, recording every
// resource, event and checkpoint, and finishes the run succeeded, failed
// (one sentence and a failure class; the steps after a failure skipped,
// nothing rolled back) or canceled (between steps).
//
// What it must never do: create an object twice for one key (a step finds
// what an earlier attempt, or a crashed process, made: servers.CreateOwned
// is idempotent), write to a run it no longer holds (any runs.ErrLeaseLost
// stops it at once), or touch a server a configuration does not own.
//
// Decisions (where the spec is silent, or this layer is not built yet):
//   - Runs of different configurations execute at once, up to
//     Options.Runs (4) per process, each in a goroutine Run owns and waits
//     for; a run that ends frees its slot and wakes the claim loop. The
//     queue keeps one run per configuration (runs_one_started) and hands a
//     free slot to the team with the fewest runs executing under this
//     process (runs.Queue.Claim), so one team's backlog of slow runs
//     cannot hold every slot while another team's run waits; within a
//     team, the oldest claimable run comes first. Before, one run executed
//     at a time per process, whatever the team. The bound is per process,
//     not per team: each replica has its own slots. There is no operator
//     flag for it yet (the executor has none); kiln serve takes the
//     default.
//   - A resumed run (a lease taken over after its owner died) plans again
//     from the applied state: keys its checkpoint lists as done are not
//     executed again, the others are, and each step converges (create
//     finds the server made before the crash, update sets the same
//     values), so a resumed run never duplicates an object.
//   - Servers, proxies and dbservices. A spec's properties go into
//     server.properties (keys Kiln sets itself before every start — the
//     listen address, the env-driven ones: those of variables with a
//     default or set in the spec's env — are refused at planning with
//     class validation); its image is recorded on the server (the docker
//     runtime runs it; the process runtime has no image). Files,
//     properties, image and attachments changed restart a running server.
//   - A running game server whose env does not accept the Minecraft
//     EULA (EULA: "true") fails the run at planning, class validation,
//     with the sentence at servers.<name>.env.EULA, before anything is
//     changed: Kiln never accepts it for the user, and a run that created
//     servers it then could not start would leave half a network. A
//     server with state: stopped is applied.
//   - Replace and delete of a server or proxy (destroy): a snapshot of it
//     is taken first (Options.Snapshots, internal/snapshot; named "before
//     delete of server/x by run run_…", kept after the server is gone),
//     then it is deleted; a replace then creates it anew. A failed
//     snapshot fails the step (class internal) with nothing destroyed; a
//     resumed step whose server is already gone takes none. Without
//     snapshot storage such a step fails and destroys nothing.
//   - Dbservices (database.go, internal/dbservice): created and updated
//     first (their tier comes before the servers'), so a server attached
//     to one finds its credentials when it starts. The planner puts the
//     names of the dbservices attached to a server into its desired state,
//     so attaching or detaching updates the server, and the update
//     restarts it (servers.Change.Restart) to give it the new environment.
//     A dbservice about to be deleted is detached from every server before
//     any step runs, so the servers restarted before its delete step no
//     longer get its credentials; its delete drops the database and user.
//     A changed max_connections updates the dbservice alone (its
//     attached servers' desired state names it, not its limit: they are
//     not restarted), and Ensure sets the user's limit anew.
//     Changing a dbservice's engine (a replace) is refused at planning
//     with class validation: it would drop the database and Kiln cannot
//     snapshot one. No host of the engine fails the step with class
//     capacity and a sentence naming `kiln admin dbhost add`; a host that
//     fails (unreachable, login refused) is class dependency, retried as
//     a transient failure first. The step's error, the run's and their
//     events carry the host's short sentence (HostError.Public: "database
//     host unavailable"), never the driver's message with the admin role,
//     maintenance database and address, which each attempt logs.
//   - Proxies (proxy.go): after the install, the proxy's own config file
//     (velocity.toml or config.yml) gets its backends — the servers of the
//     configuration it names, at the addresses Kiln gave them — the try
//     order and the forwarding mode (install.WireVelocity/WireBungee: only
//     Kiln's keys change); modern forwarding uses one secret per
//     configuration, made once and stored sealed (deploy.Secret,
//     internal/secretbox), written to forwarding.secret (0600) and to each
//     backend (install.WireBackend). A backend whose files changed and
//     that runs is restarted; a running proxy is restarted to read its new
//     configuration. Every file goes through the server's disk ledger.
//     A proxy's requested public port is the one it gets (it must be in
//     the node's port range, which deploy checks when the YAML is set and
//     at every push, so such a version is never run; taken is class
//     capacity); changed, the proxy
//     moves to it and restarts. Without one it gets the lowest free port
//     like a server.
//   - Retries: a step failing for a transient reason (a database or I/O
//     error, a server still installing) is tried again up to 3 attempts,
//     2 s then 4 s apart (resource.retrying events). Validation, team
//     limits and no free port (capacity), a failed install (install), a
//     crash (runtime) and a health timeout are not retried.
//   - Health: a server whose spec says running must answer a status ping
//     (its status running) within HealthTimeout (180 s); crashed first is
//     runtime, no answer health_timeout.
//   - The lease fences everything the run does (renew in executor.go). It
//     is renewed every third of it; a lost lease stops the run at once. A
//     renewal that fails otherwise (the database away a moment) is logged
//     and tried again, and once two thirds of the lease have passed since
//     the last renewal the run's context is canceled: it stops acting on
//     servers before the lease can expire and another process claim it.
//     The look between two steps renews too; there a failure that is not
//     a lost lease is logged and the step starts (it used to end the tier
//     early, and the run said succeeded with steps never run). Before
//     Succeeded, every step of the plan must be done; otherwise the run
//     is left leased, to resume.
//   - A resumed run plans again from the applied state, which may have
//     changed while it was paused (a server changed or deleted by hand):
//     when the steps left differ from those it recorded (key, action,
//     desired state), it records the new plan before running it — a
//     plan.computed event saying the plan changed, the new steps pending,
//     the old ones no longer in it skipped, the checkpoint's plan hash —
//     and the steps done stay done.
//   - Planning is one function (planSpec, planning.go): the applied state
//     read, plan.Make, then the refusals that fail a run before its first
//     step (unsupported, a dbservice's engine changed). A run calls it, and
//     so does Plan, which answers POST …/plan without executing or writing
//     anything: the preview and the run cannot disagree about the same
//     YAML and applied state (the run's checkpoint carries the plan's
//     hash). Plan of an unsaved edit checks it as an update would
//     (deploy.Service.Check); of the current YAML, as the run reads a
//     version (spec.Parse against today's catalog). A refusal is
//     reported with the steps planned, so a preview says both what and
//     why not.
//   - References (references.go): at planning their values are read (a
//     dbservice's credentials through Databases.Credentials, a server's
//     address) and digested: HMAC-SHA256 under Options.DigestKey, a key
//     derived from the secret key, so a digest in a run's resources
//     cannot be checked against guesses of a password. An object the plan
//     creates or replaces has no value yet: what references it gets a
//     digest that matches nothing and is updated after it. At execution
//     a step resolves its references again, writes its files (0600 when
//     one references a password: files.Root.WriteFilePrivate, created
//     so), and records the digest of what it wrote (plan.WithReferences):
//     the plan's digest may be provisional, the applied one never is. A
//     referenced object missing at execution fails the step (internal).
//     The values exist only in the server's root: never in a version, a
//     run's resources or events, the applied state or a log
//     (TestReferencesWired reads every table). A step of an update that
//     changes "references" restarts a running server, as files do.
//   - Team secrets (${secrets.NAME}, Options.TeamSecrets): checked at
//     planning, since a secret may be stored after the spec that names
//     it (and deleted after): one the team has not fails the run before
//     anything changes, class validation, the sentence naming it and
//     where it is (a plan says the same). A step reads them again; a
//     variable gets its value (the servers service seals a secret
//     variable with the server), a file is written 0600. A value that
//     changes changes the digest: the plan updates (and restarts) the
//     servers using it.
//   - Faults are tested through the Queue interface: the tests put a
//     queue that fails Renew as they say in front of the real one
//     (faults_test.go); nothing in this package knows about tests.
package executor
