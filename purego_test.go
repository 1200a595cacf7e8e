//go:build purego

package randflake

// puregoBuild: this build has no assembly kernels.
const puregoBuild = true
