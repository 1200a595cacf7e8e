package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/klauspost/cpuid/v2"
	"github.com/randflake/randflake"
)

// Machine describes the computer the benchmarks ran on.
type Machine struct {
	// ID names the results file: the CPU brand, the architecture and a hash
	// of the hostname and CPU identity, e.g. "amd-epyc-amd64-3f2a9c1b".
	ID        string `json:"id"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	OSRelease string `json:"os_release,omitempty"`
	CPU       CPU    `json:"cpu"`
	NumCPU    int    `json:"num_cpu"` // logical CPUs the benchmarks could use
	// GoVersion is the toolchain that built the benchmarks; GoArchLevel its
	// GOAMD64 or GOARM64 setting.
	GoVersion   string `json:"go_version"`
	GoArchLevel string `json:"go_arch_level,omitempty"`
	// Kernels are the kernels this CPU can run, fastest first; the library
	// selects the first, SelectedKernel, unless RANDFLAKE_KERNEL says
	// otherwise.
	Kernels        []string `json:"kernels"`
	SelectedKernel string   `json:"selected_kernel"`
	// Emulated is set when the benchmarks ran under an emulator (qemu user
	// mode): their timings say nothing about the hardware.
	Emulated      bool   `json:"emulated,omitempty"`
	EmulationNote string `json:"emulation_note,omitempty"`
}

// CPU is what klauspost/cpuid reports about the processor.
type CPU struct {
	Brand    string `json:"brand"`
	Vendor   string `json:"vendor,omitempty"`
	Family   int    `json:"family,omitempty"`
	Model    int    `json:"model,omitempty"`
	Stepping int    `json:"stepping,omitempty"`
	// X64Level is the x86-64 microarchitecture level (1 to 4), 0 elsewhere.
	X64Level int `json:"x64_level"`
	// Features are the CPU features the kernels depend on that are present;
	// AllFeatures is every feature cpuid found.
	Features       []string `json:"features"`
	AllFeatures    []string `json:"all_features"`
	PhysicalCores  int      `json:"physical_cores"`
	LogicalCores   int      `json:"logical_cores"`
	ThreadsPerCore int      `json:"threads_per_core"`
	CacheLine      int      `json:"cache_line"`
	// Cache sizes in bytes, -1 when unknown.
	L1D int `json:"l1d"`
	L1I int `json:"l1i"`
	L2  int `json:"l2"`
	L3  int `json:"l3"`
	// Hz and BoostHz are the base and boost clocks, 0 when unknown.
	Hz      int64 `json:"hz,omitempty"`
	BoostHz int64 `json:"boost_hz,omitempty"`
	// Hypervisor is the hypervisor's vendor string when the CPU reports
	// running under one, "unknown" when it does not name itself.
	Hypervisor string `json:"hypervisor,omitempty"`
}

// kernelFeatures are the CPU features the randflake kernels check.
var kernelFeatures = []cpuid.FeatureID{
	cpuid.AVX, cpuid.AVX2, cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI, cpuid.AVX512VBMI2,
	cpuid.ASIMD, cpuid.SVE,
}

// describeMachine reports the machine this process runs on. The Go version
// and arch level are filled in later, from the built test binaries.
func describeMachine() Machine {
	c := cpuid.CPU
	m := Machine{
		OS:      runtime.GOOS,
		Arch:    runtime.GOARCH,
		NumCPU:  runtime.NumCPU(),
		Kernels: randflake.Kernels(),
		CPU: CPU{
			Brand:          strings.Join(strings.Fields(c.BrandName), " "),
			Vendor:         c.VendorString,
			Family:         c.Family,
			Model:          c.Model,
			Stepping:       c.Stepping,
			X64Level:       c.X64Level(),
			AllFeatures:    c.FeatureSet(),
			PhysicalCores:  c.PhysicalCores,
			LogicalCores:   c.LogicalCores,
			ThreadsPerCore: c.ThreadsPerCore,
			CacheLine:      c.CacheLine,
			L1D:            c.Cache.L1D,
			L1I:            c.Cache.L1I,
			L2:             c.Cache.L2,
			L3:             c.Cache.L3,
			Hz:             c.Hz,
			BoostHz:        c.BoostFreq,
		},
	}
	for _, f := range kernelFeatures {
		if c.Supports(f) {
			m.CPU.Features = append(m.CPU.Features, f.String())
		}
	}
	if m.CPU.Vendor == "" && c.VendorID != cpuid.VendorUnknown {
		m.CPU.Vendor = c.VendorID.String()
	}
	if c.VM() {
		switch {
		case c.HypervisorVendorID != cpuid.VendorUnknown:
			m.CPU.Hypervisor = c.HypervisorVendorID.String()
		case c.HypervisorVendorString != "":
			m.CPU.Hypervisor = c.HypervisorVendorString
		default:
			m.CPU.Hypervisor = "unknown"
		}
	}
	if m.CPU.Brand == "" {
		m.CPU.Brand = cpuinfoField("model name")
	}
	if m.CPU.Brand == "" && runtime.GOARCH == "arm64" && c.VendorID != cpuid.VendorUnknown {
		// Linux on Arm has no brand string: name the implementer and the
		// part number of MIDR_EL1 (cpuid keeps its low 16 bits as Model).
		m.CPU.Brand = fmt.Sprintf("%s part 0x%03x", c.VendorID, (c.Model>>4)&0xfff)
	}
	if m.CPU.Brand == "" {
		m.CPU.Brand = "unknown " + runtime.GOARCH + " CPU"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OSRelease = strings.TrimSpace(string(b))
	}
	if len(m.Kernels) > 0 {
		m.SelectedKernel = m.Kernels[0]
	}
	m.Emulated, m.EmulationNote = detectEmulation()
	m.ID = machineID(m)
	return m
}

// machineID derives a file name that stays the same on reruns on the same
// machine: the brand, the architecture and a hash of the hostname and the
// CPU's identity.
func machineID(m Machine) string {
	host, _ := os.Hostname()
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%d.%d.%d\x00%d",
		host, m.CPU.Brand, m.CPU.Vendor, m.CPU.Family, m.CPU.Model, m.CPU.Stepping, m.NumCPU)))
	return slug(m.CPU.Brand) + "-" + m.Arch + "-" + hex.EncodeToString(h[:4])
}

// slug keeps the letters and digits of s, lower case, runs of anything else
// turned into one hyphen, at most 40 bytes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	if b.Len() == 0 {
		return "cpu"
	}
	return b.String()
}

// detectEmulation recognises a binary running under qemu user mode on Linux:
// the emulator passes the host's /proc/cpuinfo through, so an arm64 process
// sees an x86 vendor_id, and an amd64 process sees an Arm CPU implementer.
func detectEmulation() (bool, string) {
	switch runtime.GOARCH {
	case "arm64", "arm":
		if v := cpuinfoField("vendor_id"); v != "" {
			return true, fmt.Sprintf("%s binary on an x86 host (vendor %s in /proc/cpuinfo): emulated, so the timings say nothing about %s hardware", runtime.GOARCH, v, runtime.GOARCH)
		}
	case "amd64", "386":
		if v := cpuinfoField("CPU implementer"); v != "" {
			return true, fmt.Sprintf("%s binary on an Arm host (CPU implementer %s): emulated or translated, so the timings say nothing about %s hardware", runtime.GOARCH, v, runtime.GOARCH)
		}
	}
	return false, ""
}

// cpuinfoField returns the first value of the given field in /proc/cpuinfo,
// or "".
func cpuinfoField(name string) string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
