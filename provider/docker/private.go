package docker

import (
	"context"
	"fmt"
	"strings"

	moby "github.com/moby/moby/client"
)

// LabelView records how a sandbox's commands see its filesystem: viewPrivate
// (runboxd's directory is not in their view) or why not.
const LabelView = "runbox.view"

// viewPrivate is LabelView's value when commands run in a mount namespace
// of their own without /.runbox.
const viewPrivate = "private"

// ctrPrivate is runboxd's directory in the container: its binary, socket
// directory and state, none of which commands see.
const ctrPrivate = "/.runbox"

// commandView is what the container needs so that runboxd can run its
// commands in a view without its own files (runboxd serve --private, see
// internal/commandview).
type commandView struct {
	args        []string // runboxd serve's flags
	capAdd      []string
	securityOpt []string
	label       string // LabelView
}

// viewFor decides the commands' view for a container of image.
//
// runboxd builds the view itself, as the container's PID 1, so the
// container gets CAP_SYS_ADMIN: runboxd drops it (with every capability
// Docker does not give by default) from the bounding set of the thread it
// forks commands from, and filters the system calls Docker's default
// profile refuses a container without it, so commands get neither.
// AppArmor's docker-default profile refuses every mount, so on an engine
// with AppArmor the container runs unconfined by it (runc's masked and
// read-only /proc and /sys paths, the capability sets and seccomp still
// apply to commands).
//
// An image whose user is not root gets no private view: runboxd runs as
// that user, without the capabilities to build one (the label says so).
func viewFor(ctx context.Context, cli *moby.Client, eng EngineInfo, image string) (commandView, error) {
	ii, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return commandView{}, fmt.Errorf("inspect image %s: %w", image, engineError(cli, err))
	}
	user := ""
	if ii.Config != nil {
		user = ii.Config.User
	}
	if !isRoot(user) {
		return commandView{label: fmt.Sprintf("shared: the image's user %q is not root, so runboxd cannot hide %s from its commands", user, ctrPrivate)}, nil
	}
	v := commandView{args: []string{"--private", ctrPrivate}, capAdd: []string{"CAP_SYS_ADMIN"}, label: viewPrivate}
	if eng.AppArmor {
		v.securityOpt = append(v.securityOpt, "apparmor=unconfined")
	}
	return v, nil
}

// isRoot reports whether an image's USER is root ("" is).
func isRoot(user string) bool {
	name, _, _ := strings.Cut(user, ":")
	return name == "" || name == "root" || name == "0"
}
