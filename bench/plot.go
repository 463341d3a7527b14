package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotAll draws one PNG per section present in rep.
func plotAll(dir string, rep *Report) error {
	if rep.Latency != nil {
		if err := plotLatency(filepath.Join(dir, "latency.png"), rep.Latency); err != nil {
			return err
		}
	}
	if len(rep.Throughput) > 0 {
		if err := plotThroughput(filepath.Join(dir, "throughput.png"), rep.Throughput); err != nil {
			return err
		}
	}
	if len(rep.Stop) > 0 {
		if err := plotStop(filepath.Join(dir, "stop.png"), rep.Stop); err != nil {
			return err
		}
	}
	if len(rep.Concurrent) > 0 {
		if err := plotConcurrent(filepath.Join(dir, "concurrent.png"), rep.Concurrent); err != nil {
			return err
		}
	}
	if len(rep.Sandboxes) > 0 {
		if err := plotSandboxes(filepath.Join(dir, "sandboxes.png"), rep.Sandboxes); err != nil {
			return err
		}
	}
	return nil
}

// plotLatency draws a box plot (median, quartiles, whiskers to 1.5 IQR,
// outliers as points) of each way's samples.
func plotLatency(path string, l *LatencyReport) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Running `true` once (%d rounds × %d, interleaved)", l.Rounds, l.PerRound)
	p.Y.Label.Text = "wall time (ms, log)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var names []string
	for i, w := range l.Ways {
		b, err := plotter.NewBoxPlot(vg.Points(18), float64(i), plotter.Values(w.Samples))
		if err != nil {
			return err
		}
		b.FillColor = plotutil.Color(i)
		p.Add(b)
		names = append(names, w.Name)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = -0.9
	p.X.Tick.Label.YAlign = -0.3
	p.Add(plotter.NewGrid())
	return p.Save(12*vg.Inch, 6*vg.Inch, path)
}

func plotThroughput(path string, ts []Throughput) error {
	p := logLogPlot("Output throughput vs output size (median of runs)",
		"output size (MiB, log)", "MB/s (log)")
	byWay := map[string]plotter.XYs{}
	var order []string
	for _, t := range ts {
		if _, ok := byWay[t.Way]; !ok {
			order = append(order, t.Way)
		}
		byWay[t.Way] = append(byWay[t.Way], plotter.XY{X: float64(t.Bytes) / (1 << 20), Y: t.Stat.Median})
	}
	for i, w := range order {
		if err := addLine(p, i, w, byWay[w]); err != nil {
			return err
		}
	}
	return saveLines(p, path, false)
}

func plotStop(path string, ss []StopLatency) error {
	p := logLogPlot("Stop latency: stop request → last process gone (median)",
		"processes in the tree (log)", "ms (log)")
	var rb, bare, rbIgn, bareIgn plotter.XYs
	for _, s := range ss {
		x := float64(s.Procs)
		if s.IgnoreTerm {
			rbIgn = append(rbIgn, plotter.XY{X: x, Y: math.Max(s.Runbox.Median, 0.1)})
			bareIgn = append(bareIgn, plotter.XY{X: x, Y: math.Max(s.Bare.Median, 0.1)})
			continue
		}
		rb = append(rb, plotter.XY{X: x, Y: s.Runbox.Median})
		bare = append(bare, plotter.XY{X: x, Y: s.Bare.Median})
	}
	if err := addLine(p, 0, "runbox (Cancel), obeying SIGTERM", rb); err != nil {
		return err
	}
	if err := addLine(p, 1, "bare (killpg, poll 1 ms), obeying SIGTERM", bare); err != nil {
		return err
	}
	if len(rbIgn) > 0 {
		if err := addPoints(p, 2, "runbox, ignoring SIGTERM (net of grace)", rbIgn); err != nil {
			return err
		}
		if err := addPoints(p, 3, "bare, ignoring SIGTERM (net of grace)", bareIgn); err != nil {
			return err
		}
	}
	return saveLines(p, path, true)
}

func plotConcurrent(path string, cs []Concurrency) error {
	p := logLogPlot("Concurrent `true` execs in one host sandbox vs bare spawns",
		"concurrent workers (log)", "per-exec latency, median (ms, log)")
	var rb, bare plotter.XYs
	for _, c := range cs {
		rb = append(rb, plotter.XY{X: float64(c.Workers), Y: c.Runbox.Median})
		bare = append(bare, plotter.XY{X: float64(c.Workers), Y: c.Bare.Median})
	}
	if err := addLine(p, 0, "client.Exec (one client)", rb); err != nil {
		return err
	}
	if err := addLine(p, 1, "bare spawn", bare); err != nil {
		return err
	}
	return saveLines(p, path, true)
}

func plotSandboxes(path string, ss []SandboxScale) error {
	p := logLogPlot("Many host sandboxes on one machine (medians)",
		"sandboxes (log)", "ms, or MiB resident (log)")
	var create, first, bare, rss plotter.XYs
	for _, s := range ss {
		x := float64(s.Sandboxes)
		create = append(create, plotter.XY{X: x, Y: s.CreateMs.Median})
		first = append(first, plotter.XY{X: x, Y: s.FirstExecMs.Median})
		bare = append(bare, plotter.XY{X: x, Y: s.BareMs.Median})
		rss = append(rss, plotter.XY{X: x, Y: s.IdleRSSKB.Median / 1024})
	}
	for i, l := range []struct {
		name string
		xy   plotter.XYs
	}{{"create (ms)", create}, {"first exec (ms)", first}, {"bare spawn (ms)", bare}, {"idle runboxd RSS (MiB)", rss}} {
		if err := addLine(p, i, l.name, l.xy); err != nil {
			return err
		}
	}
	return saveLines(p, path, true)
}

// logLogPlot is a plot with log scales on both axes.
func logLogPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	return p
}

// saveLines adds a grid and writes a line plot to path, its legend top
// left or bottom right.
func saveLines(p *plot.Plot, path string, legendTopLeft bool) error {
	p.Legend.Top, p.Legend.Left = legendTopLeft, legendTopLeft
	p.Add(plotter.NewGrid())
	return p.Save(10*vg.Inch, 6*vg.Inch, path)
}

func addLine(p *plot.Plot, i int, name string, xy plotter.XYs) error {
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
	l.Width = vg.Points(1.5)
	pts.Shape = plotutil.Shape(i)
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

func addPoints(p *plot.Plot, i int, name string, xy plotter.XYs) error {
	s, err := plotter.NewScatter(xy)
	if err != nil {
		return err
	}
	s.Color = plotutil.Color(i)
	s.Shape = plotutil.Shape(i)
	s.Radius = vg.Points(4)
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}

// printSummary prints the headline figures as Markdown tables.
func printSummary(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\n%s, %d × %s, kernel %s, %s; load %s → %s\n", rep.Date, rep.Machine.CPUs, rep.Machine.CPUModel,
		rep.Machine.Kernel, rep.Machine.GoVersion, rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	if l := rep.Latency; l != nil {
		fmt.Fprintf(w, "\n| way | median ms (p10–p90) | ratio to baseline, median (min–max of %d rounds) | goal |\n|---|---|---|---|\n", l.Rounds)
		for _, x := range l.Ways {
			ratio, goal := "baseline", ""
			if x.Ratio != nil {
				ratio = fmt.Sprintf("%.2f× (%.2f–%.2f) vs %s", x.Ratio.Median, x.Ratio.Min, x.Ratio.Max, x.Baseline)
			}
			if x.Goal > 0 {
				goal = fmt.Sprintf("≤ %g×", x.Goal)
			}
			if x.AddedMs != nil {
				ratio += fmt.Sprintf("; +%.2f ms (%.2f–%.2f)", x.AddedMs.Median, x.AddedMs.Min, x.AddedMs.Max)
			}
			if x.GoalAddedMs > 0 {
				goal = fmt.Sprintf("≤ +%g ms", x.GoalAddedMs)
			}
			fmt.Fprintf(w, "| %s | %.2f (%.2f–%.2f) | %s | %s |\n", x.Name, x.Stat.Median, x.Stat.P10, x.Stat.P90, ratio, goal)
		}
	}
	if len(rep.Throughput) > 0 {
		fmt.Fprintf(w, "\n| way | size | MB/s median (min–max) | ÷ pipe | goal | daemon / client CPU s per GiB | peak RSS daemon / client |\n|---|---|---|---|---|---|---|\n")
		for _, t := range rep.Throughput {
			ratio := ""
			if t.RatioToPipe != nil {
				ratio = fmt.Sprintf("%.2f×", t.RatioToPipe.Median)
			}
			cpu, rss, goal := "", "", ""
			if t.Goal > 0 {
				goal = fmt.Sprintf("≥ %g×", t.Goal)
			}
			if t.DaemonCPU > 0 || t.ClientCPU > 0 {
				cpu = fmt.Sprintf("%.2f / %.2f", t.DaemonCPU, t.ClientCPU)
			}
			if t.DaemonPeakKB > 0 {
				rss = fmt.Sprintf("%.0f / %.0f MiB", float64(t.DaemonPeakKB)/1024, float64(t.ClientPeakKB)/1024)
			}
			fmt.Fprintf(w, "| %s | %d MiB | %.0f (%.0f–%.0f) | %s | %s | %s | %s |\n", t.Way, t.Bytes>>20, t.Stat.Median, t.Stat.Min, t.Stat.Max, ratio, goal, cpu, rss)
		}
	}
	if len(rep.Stop) > 0 {
		fmt.Fprintf(w, "\n| tree | runbox ms median (min–max) | bare ms median | ratio | killed | survivors | goal |\n|---|---|---|---|---|---|---|\n")
		for _, s := range rep.Stop {
			name := fmt.Sprintf("%d obeying", s.Procs)
			if s.IgnoreTerm {
				name = fmt.Sprintf("%d ignoring TERM (net of %.0f ms grace)", s.Procs, s.GraceMs)
			}
			goal := ""
			if s.GoalMs > 0 {
				goal = fmt.Sprintf("≤ %.0f ms", s.GoalMs)
			}
			fmt.Fprintf(w, "| %s | %.1f (%.1f–%.1f) | %.1f | %.2f× | %d | %d | %s |\n", name, s.Runbox.Median, s.Runbox.Min, s.Runbox.Max, s.Bare.Median, s.Ratio.Median, s.Killed, s.Survivors, goal)
		}
	}
	if len(rep.Concurrent) > 0 {
		fmt.Fprintf(w, "\n| workers | runbox ms median (p90) | bare ms median (p90) | latency ratio | runbox execs/s | bare execs/s |\n|---|---|---|---|---|---|\n")
		for _, c := range rep.Concurrent {
			fmt.Fprintf(w, "| %d | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %.0f | %.0f |\n", c.Workers, c.Runbox.Median, c.Runbox.P90, c.Bare.Median, c.Bare.P90, c.LatencyRate, c.RunboxRate, c.BareRate)
		}
	}
	if len(rep.Sandboxes) > 0 {
		fmt.Fprintf(w, "\n| sandboxes | create ms median (max) | created/s | idle runboxd RSS MiB (÷ sleep) | first exec ms | ÷ bare spawn |\n|---|---|---|---|---|---|\n")
		for _, s := range rep.Sandboxes {
			fmt.Fprintf(w, "| %d | %.1f (%.1f) | %.1f | %.1f (%.1f×) | %.2f | %.2f× |\n", s.Sandboxes, s.CreateMs.Median, s.CreateMs.Max, s.CreatePerS,
				s.IdleRSSKB.Median/1024, s.IdleRSSKB.Median/float64(max(s.BaselineRSSKB, 1)), s.FirstExecMs.Median, s.FirstRatio.Median)
		}
	}
}
