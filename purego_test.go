//go:build !gc || purego

package randflake

// puregoBuild: this build (purego, or a toolchain other than gc) has no
// assembly kernels.
const puregoBuild = true
