package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The security section (issue 27) measures what the local sandbox's
// isolation costs: its default root (the host's root through fuse-overlayfs,
// read as an unprivileged stranger, and a loop-mounted disk image for what
// the sandbox writes) beside the configurations closest to the one before
// (--disk 0: no bound, its image as large as the home's filesystem;
// --host-root: the kernel's overlay straight over the host's root, no user
// namespace) and the host provider (no isolation at all). Each
// round makes one fresh sandbox per configuration, the configurations
// interleaved, so that the cold walk of the root is cold in every round.

// securityConfigs are the compared configurations: a name and the extra
// arguments of `runbox up`.
var securityConfigs = []struct {
	name string
	args []string
}{
	{"local default (FUSE root, disk image)", []string{"--provider", "local"}},
	{"local --disk 0 (FUSE root, unbounded image)", []string{"--provider", "local", "--disk", "0"}},
	{"local --host-root --disk 0 (kernel overlay)", []string{"--provider", "local", "--host-root", "--disk", "0"}},
	{"host (no isolation)", []string{"--provider", "host"}},
}

// securityJobs are the timed commands, run in this order in each fresh
// sandbox after its first exec. The copy goes to a fresh directory under
// /var/tmp: the sandbox's overlay (its disk image by default), the host's
// own /var/tmp for the host provider. tar x runs as users run it, setting
// owners and times (with --disk 0, fuse-overlayfs once answered its utime
// and chown of a file just written with ENOENT: see docs/providers.md).
var securityJobs = []struct {
	name, script string
}{
	{"find /usr/lib | wc -l, cold", "find /usr/lib -xdev | wc -l"},
	{"tar /usr/share/doc into /var/tmp, find, cat all", `d=$(mktemp -d /var/tmp/rbsec.XXXXXX) && tar -C /usr/share -cf - doc | tar -C "$d" -xf - && find "$d" -type f -exec cat {} + | wc -c && rm -rf "$d"`},
}

// SecurityRow is one configuration's figures, medians over the rounds, ms.
type SecurityRow struct {
	Config string             `json:"config"`
	Up     Stat               `json:"up_first_exec_ms"`
	True   Stat               `json:"exec_true_ms"`
	Jobs   map[string]Stat    `json:"jobs_ms"`
	Ratio  map[string]float64 `json:"ratio_to_host"` // median of per-round ratios to the host provider
}

// SecurityReport is the section's result, written to security.json.
type SecurityReport struct {
	Date    string        `json:"date"`
	Command string        `json:"command"`
	Machine Machine       `json:"machine"`
	Rounds  int           `json:"rounds"`
	Rows    []SecurityRow `json:"rows"`
}

// benchSecurity runs the section and writes security.json in cfg.out.
func benchSecurity(cfg *config, env *sandboxes) (*SecurityReport, error) {
	rounds := 3
	if cfg.quick {
		rounds = 1
	}
	const trues = 10
	type samples struct {
		up, tru []float64
		jobs    map[string][]float64
	}
	got := make([]samples, len(securityConfigs))
	for i := range got {
		got[i].jobs = map[string][]float64{}
	}
	sh := func(id, script string) (time.Duration, error) {
		cmd := exec.Command(filepath.Join(cfg.bin, "runbox"), "exec", id, "--", "sh", "-c", script)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			return d, fmt.Errorf("%w: %s", err, stderr.String())
		}
		return d, nil
	}
	for r := 0; r < rounds; r++ {
		for i, c := range securityConfigs {
			start := time.Now()
			id, err := env.runbox(append(append([]string{"up"}, c.args...), "--workdir", cfg.workdir)...)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			if _, err := env.runbox("exec", id, "--", "true"); err != nil {
				env.runbox("rm", "-f", id)
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			got[i].up = append(got[i].up, ms(time.Since(start)))
			var sum time.Duration
			for range trues {
				d, err := timeCmd([]string{filepath.Join(cfg.bin, "runbox"), "exec", id, "--", "true"})
				if err != nil {
					env.runbox("rm", "-f", id)
					return nil, fmt.Errorf("%s: %w", c.name, err)
				}
				sum += d
			}
			got[i].tru = append(got[i].tru, ms(sum/trues))
			for _, j := range securityJobs {
				d, err := sh(id, j.script)
				if err != nil {
					env.runbox("rm", "-f", id)
					return nil, fmt.Errorf("%s: %s: %w", c.name, j.name, err)
				}
				got[i].jobs[j.name] = append(got[i].jobs[j.name], ms(d))
			}
			if _, err := env.runbox("rm", "-f", id); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			log.Printf("security: round %d: %s: up %.0f ms, true %.1f ms, jobs %v ms", r+1, c.name, got[i].up[r], got[i].tru[r], jobsOf(got[i].jobs, r))
		}
	}
	host := got[len(got)-1]
	ratio := func(xs, base []float64) float64 {
		rs := make([]float64, len(xs))
		for k := range xs {
			rs[k] = xs[k] / base[k]
		}
		return stat(rs).Median
	}
	rep := &SecurityReport{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "go run ./bench " + strings.Join(os.Args[1:], " "),
		Machine: machine(),
		Rounds:  rounds,
	}
	for i, c := range securityConfigs {
		row := SecurityRow{Config: c.name, Up: stat(got[i].up), True: stat(got[i].tru), Jobs: map[string]Stat{}, Ratio: map[string]float64{}}
		row.Ratio["up"] = ratio(got[i].up, host.up)
		row.Ratio["true"] = ratio(got[i].tru, host.tru)
		for _, j := range securityJobs {
			row.Jobs[j.name] = stat(got[i].jobs[j.name])
			row.Ratio[j.name] = ratio(got[i].jobs[j.name], host.jobs[j.name])
		}
		rep.Rows = append(rep.Rows, row)
	}
	if err := writeJSON(cfg.out, "security.json", rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// printSecurity writes the section's table: medians, and in brackets the
// median of the per-round ratios to the host provider.
func printSecurity(w io.Writer, rep *SecurityReport) {
	fmt.Fprintf(w, "\nsecurity (issue 27): %d rounds, a fresh sandbox per configuration and round; ms, median (× host)\n", rep.Rounds)
	fmt.Fprintf(w, "| configuration | up + first exec | exec true (mean of 10) |")
	for _, j := range securityJobs {
		fmt.Fprintf(w, " %s |", j.name)
	}
	fmt.Fprintf(w, "\n|---|---|---|")
	for range securityJobs {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %s | %.0f (%.2f×) | %.1f (%.2f×) |", r.Config, r.Up.Median, r.Ratio["up"], r.True.Median, r.Ratio["true"])
		for _, j := range securityJobs {
			fmt.Fprintf(w, " %.0f (%.2f×) |", r.Jobs[j.name].Median, r.Ratio[j.name])
		}
		fmt.Fprintln(w)
	}
}

// jobsOf is round r's job times, in securityJobs' order.
func jobsOf(jobs map[string][]float64, r int) []int {
	var out []int
	for _, j := range securityJobs {
		out = append(out, int(jobs[j.name][r]))
	}
	return out
}
