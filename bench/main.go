// Command bench runs runbox's benchmarks, each against a baseline measured
// in the same run, and writes the numbers as JSON and the plots as PNG:
//
//	go run ./bench                 # everything, as docs/performance.md reports it
//	go run ./bench -quick          # fewer rounds and smaller sizes, for a look
//	go run ./bench -only latency,throughput
//	go run ./bench -only soak      # 100,000 mixed commands (-soak-ops N), to soak.json and soak.png
//	go run ./bench -only security  # what the local sandbox's isolation costs, to security.json
//	go run ./bench -only snapshot  # pause, snapshot and fork (issue 32), to snapshot.json; -full adds 1 GiB and 50 forks
//	go run ./bench -soak-partial N # soak.json and soak.png of a soak stopped after N commands
//
// It builds runbox and runboxd (CGO_ENABLED=0) into a temporary directory,
// makes its own sandboxes under a temporary RUNBOX_HOME and removes them at
// the end. Benchmarks, not tests: nothing here passes or fails on a figure.
//
// Every comparison is interleaved (round by round, each way once per round)
// so that the other load of a shared machine falls on both sides alike, and
// is reported as the median of the per-round ratios with their spread.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// config is what the flags say.
type config struct {
	out     string
	quick   bool
	only    map[string]bool
	rounds  int
	workdir string // a directory the sandboxes run in
	bin     string // where runbox and runboxd were built
	home    string // RUNBOX_HOME of this run
	soakOps int    // commands of the soak
	full    bool   // the slow sizes of the snapshot section
	// snapProviders are the providers the snapshot section measures.
	snapProviders []string
}

// want reports whether section runs. The soak, security and snapshot
// sections run only when asked for by name: they take long, and write
// files of their own.
func (c *config) want(section string) bool {
	if section == "soak" || section == "security" || section == "snapshot" {
		return c.only[section]
	}
	return len(c.only) == 0 || c.only[section]
}

// Report is the JSON document the run writes.
type Report struct {
	Date       string         `json:"date"`
	Machine    Machine        `json:"machine"`
	Command    string         `json:"command"`
	Latency    *LatencyReport `json:"latency,omitempty"`
	Throughput []Throughput   `json:"throughput,omitempty"`
	Stop       []StopLatency  `json:"stop,omitempty"`
	Concurrent []Concurrency  `json:"concurrent,omitempty"`
	Sandboxes  []SandboxScale `json:"sandboxes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"go"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

func main() {
	var cfg config
	var only string
	flag.StringVar(&cfg.out, "out", "docs/performance", "directory for results.json and the plots")
	flag.BoolVar(&cfg.quick, "quick", false, "fewer rounds and smaller outputs")
	flag.StringVar(&only, "only", "", "comma-separated sections: latency,throughput,stop,concurrent,sandboxes,soak,security,snapshot (soak, security and snapshot run only when named)")
	flag.BoolVar(&cfg.full, "full", false, "snapshot: also 1 GiB of changes and a fork of 50 (slow)")
	flag.IntVar(&cfg.soakOps, "soak-ops", 100000, "commands of the soak")
	flag.IntVar(&cfg.rounds, "rounds", 0, "rounds of the interleaved latency comparison (default 20, quick 5)")
	snapProviders := flag.String("snapshot-providers", "local,docker", "snapshot: comma-separated providers to measure")
	replot := flag.Bool("replot", false, "only redraw the plots (and print the tables) from the -out directory's results.json")
	soakPartial := flag.Int("soak-partial", 0, "only write soak.json and soak.png from the -out directory's soak-partial.json, of a soak stopped after this many commands")
	flag.Parse()
	cfg.snapProviders = strings.Split(*snapProviders, ",")
	if *soakPartial > 0 {
		if err := replotSoakPartial(cfg.out, *soakPartial); err != nil {
			log.Fatalf("bench: %v", err)
		}
		return
	}
	if *replot {
		if err := redraw(cfg.out); err != nil {
			log.Fatalf("bench: %v", err)
		}
		return
	}
	if only != "" {
		cfg.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			cfg.only[strings.TrimSpace(s)] = true
		}
	}
	if cfg.rounds == 0 {
		cfg.rounds = 20
		if cfg.quick {
			cfg.rounds = 5
		}
	}
	if err := run(&cfg); err != nil {
		log.Fatalf("bench: %v", err)
	}
}

func run(cfg *config) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("/tmp", "rbb.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.bin = filepath.Join(tmp, "bin")
	cfg.home = filepath.Join(tmp, "h")
	cfg.workdir = filepath.Join(tmp, "w")
	for _, d := range []string{cfg.bin, cfg.home, cfg.workdir, cfg.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	log.Printf("building runbox, runbox-full, runbox-server and runboxd into %s", cfg.bin)
	build := exec.Command("go", "build", "-o", cfg.bin+"/", "./cmd/runbox", "./cmd/runbox-full", "./cmd/runbox-server", "./cmd/runboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	os.Setenv("RUNBOX_HOME", cfg.home)
	os.Setenv("RUNBOX_RUNBOXD", filepath.Join(cfg.bin, "runboxd"))

	rep := Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "go run ./bench " + strings.Join(os.Args[1:], " "),
		Machine: machine(),
	}
	env := &sandboxes{cfg: cfg}
	defer env.removeAll()

	if cfg.want("soak") {
		log.Printf("soak: %d commands", cfg.soakOps)
		soak, err := benchSoak(ctx, cfg, env)
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		if err := writeSoak(cfg.out, soak); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		printSoak(soak)
		if len(cfg.only) == 1 {
			return nil // results.json keeps the other sections' last run
		}
	}
	if cfg.want("security") {
		log.Printf("security: the local sandbox's isolation against the host provider")
		sec, err := benchSecurity(cfg, env)
		if err != nil {
			return fmt.Errorf("security: %w", err)
		}
		printSecurity(os.Stdout, sec)
		if len(cfg.only) == 1 {
			return nil // results.json keeps the other sections' last run
		}
	}
	if cfg.want("snapshot") {
		log.Printf("snapshot: pause, snapshot and fork on %s", strings.Join(cfg.snapProviders, " and "))
		snap, err := benchSnapshot(ctx, cfg, env, cfg.full)
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		printSnapshot(os.Stdout, snap)
		if len(cfg.only) == 1 {
			return nil // results.json keeps the other sections' last run
		}
	}
	if cfg.want("latency") {
		log.Printf("latency: %d interleaved rounds", cfg.rounds)
		if rep.Latency, err = benchLatency(ctx, cfg, env); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if cfg.want("throughput") {
		log.Printf("throughput")
		if rep.Throughput, err = benchThroughput(ctx, cfg, env); err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
	}
	if cfg.want("stop") {
		log.Printf("stop latency")
		if rep.Stop, err = benchStop(ctx, cfg, env); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	if cfg.want("concurrent") {
		log.Printf("concurrent execs")
		if rep.Concurrent, err = benchConcurrent(ctx, cfg, env); err != nil {
			return fmt.Errorf("concurrent: %w", err)
		}
	}
	if cfg.want("sandboxes") {
		log.Printf("sandboxes on one machine")
		if rep.Sandboxes, err = benchSandboxes(ctx, cfg); err != nil {
			return fmt.Errorf("sandboxes: %w", err)
		}
	}
	rep.Machine.LoadAfter = loadavg()

	if err := writeJSON(cfg.out, "results.json", &rep); err != nil {
		return err
	}
	if err := plotAll(cfg.out, &rep); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	printSummary(os.Stdout, &rep)
	return nil
}

// redraw draws the plots and prints the tables of an earlier run.
func redraw(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	if err := plotAll(dir, &rep); err != nil {
		return err
	}
	printSummary(os.Stdout, &rep)
	return nil
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// writeJSON writes v, indented, as the file name in dir.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}
