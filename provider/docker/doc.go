// Package docker is the runbox provider whose sandboxes are Docker
// containers: a container from any image, with the static runboxd binary
// run as PID 1 in place of the image's entrypoint: bind-mounted read-only
// from the home's copy when the engine is local (so it is never in the
// container's writable layer, nor in a snapshot), copied in before start
// when it is remote. It talks to the engine through the official Go client
// (github.com/moby/moby/client) and honours DOCKER_HOST and the rest of the
// usual client environment. Without DOCKER_HOST, when nothing answers on
// Docker's socket, it uses Podman's (NewEngineClient); Podman, rootful and
// rootless, is a supported engine (docs/podman.md). Limits the engine would
// drop (rootless Podman on cgroup v1) are refused (ErrLimitUnsupported).
//
// Containers carry labels, so any process — or any machine talking to the
// same engine — finds a sandbox by id or name without local state:
//
//	runbox.sandbox=<id>      the sandbox id (12 hex digits)
//	runbox.name=<name>       its optional alias (the container is named runbox-<name|id>)
//	runbox.spec=<json>       the spec it was created from
//	runbox.created=<time>    when it was created (RFC 3339)
//	runbox.stream=socket|exec  how the API reaches runboxd
//	runbox.socket=<path>     the host path of runboxd's socket (socket stream)
//	runbox.view=private|...  whether commands run in a view without /.runbox
//	runbox.engine=<engine>   which engine made it ("podman 4.3.1 (rootless, cgroup v1)")
//
// The byte stream to runboxd takes one of two paths:
//
//   - socket: when the engine runs on this machine (a unix-socket
//     DOCKER_HOST), the host directory $RUNBOX_HOME/docker/<id>/run is
//     bind-mounted at /.runbox/run and runboxd listens on a socket there, so
//     a client — a fresh `runbox exec` process included — connects straight
//     to it, without a `docker exec` per command or even a call to the
//     engine.
//   - exec: for a remote engine, or when forced (Provider.ForceExecStream,
//     or RUNBOX_DOCKER_STREAM=exec), the stream is a `docker exec` of
//     `runboxd proxy` with stdin and stdout attached, hijacked through the
//     Engine API. One such stream carries many concurrent execs (HTTP/2);
//     when it breaks, the client opens another and re-attaches.
//
// Limits come from the spec through the container's host config: memory,
// pids, CPUs, and the network mode ("none" by default; "host" and named
// networks are passed through). A spec's Workdir is bind-mounted at
// /workspace, which becomes the working directory.
//
// Commands cannot reach runboxd's files. For an image whose user is root,
// runboxd (serve --private /.runbox, see internal/commandview) forks every
// command from a thread that has a mount namespace of its own, in which
// /.runbox (runboxd's binary and socket directory) is an empty read-only
// directory and runboxd's state directory /.runbox-state (spill files,
// session functions) is read-only; `docker exec` and so `runboxd proxy`
// join the container's original namespace and still find the socket. The
// container is given CAP_SYS_ADMIN for runboxd to build that view (and, on
// an engine with AppArmor, runs unconfined by AppArmor's docker-default
// profile, which refuses every mount); commands never hold the capability:
// runboxd drops it, and every capability Docker does not give by default,
// from their bounding set, and filters the system calls Docker's default
// seccomp profile refuses a container without it. runboxd is non-dumpable,
// so /proc/1/root and its like are closed to commands. A failure to build
// the view stops runboxd, and Create fails with the reason. An image whose
// user is not root gets no private view (label runbox.view says why).
//
// A container that dies (docker kill, an engine restart) takes every process
// in it along: the kernel kills a pid namespace whose PID 1 exits. Clients
// then fail with runbox.ErrSandboxLost, Get and List report it not alive,
// and Remove deletes it without needing force.
package docker
