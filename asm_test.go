//go:build gc && !purego

package randflake

// puregoBuild: this build has the assembly kernels of its architecture.
const puregoBuild = false
