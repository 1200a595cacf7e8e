package randflake

// cacheLine is the spacing that keeps data written by different CPUs apart:
// twice the usual 64 bytes, because adjacent-line prefetch makes
// neighbouring lines contend too.
const cacheLine = 128
