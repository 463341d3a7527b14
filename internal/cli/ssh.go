package cli

import (
	"github.com/spf13/pflag"

	"github.com/runbox/runbox/provider/ssh"
)

// sshFlags are up's and run's flags for the ssh provider.
type sshFlags struct {
	target    string
	acceptNew bool
	fs        *pflag.FlagSet
}

func (f *sshFlags) add(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.target, "ssh", "", "ssh: the host, as [user@]host[:port] or a ~/.ssh/config alias (default $"+ssh.TargetEnv+"); implies --provider ssh")
	fs.BoolVar(&f.acceptNew, "ssh-accept-new", false, "ssh: record the key of a host no known_hosts file knows yet (like StrictHostKeyChecking=accept-new); a changed key is refused")
}

// provider returns the provider to use: ssh when --ssh is given without
// --provider, else name.
func (f *sshFlags) provider(name string) string {
	if f.target != "" && f.fs != nil && !f.fs.Changed("provider") {
		return ssh.ProviderName
	}
	return name
}

// set reports whether any of the flags is given.
func (f *sshFlags) set() bool { return f.target != "" || f.acceptNew }
