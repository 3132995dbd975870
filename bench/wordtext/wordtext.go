// Package wordtext generates the benchmark's text: words of a fixed
// vocabulary of pseudo-words, common words more often, so that it
// compresses as real documents do (with LZ4 in 32 KiB pages about 1.8x
// for 256-byte docs, 1.7x for 24-byte texts), neither like random
// characters (1.0x) nor like repeated filler.
//
// It is its own leaf package so that the workload generator and the
// micro-benchmarks of lower packages (delta/datafile, which the
// generator's verifier imports) write the same text.
package wordtext

// Mix is splitmix64's finalizer: a cheap, well-spread hash step.
func Mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

const vocabBits = 10

// vocab is the vocabulary: 1,024 pseudo-words of 2-9 lowercase letters,
// fixed for every run.
var vocab = func() [][]byte {
	words := make([][]byte, 1<<vocabBits)
	for w := range words {
		x := Mix(0x7e47 + uint64(w))
		b := make([]byte, 2+x%8)
		x >>= 3
		for i := range b {
			b[i] = byte('a' + x%26)
			x /= 26
		}
		words[w] = b
	}
	return words
}()

// Append appends n bytes of text drawn from h: words separated by
// spaces, the last one cut at n. Each word is drawn from its own hash of
// h and its position, skewed toward the vocabulary's first words (the
// product of two uniform draws) as real text favours its common words.
// The same h and n always give the same text.
func Append(dst []byte, h uint64, n int) []byte {
	start := len(dst)
	const mask = 1<<vocabBits - 1
	for i := uint64(0); len(dst)-start < n; i++ {
		x := Mix(h + i)
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, vocab[(x&mask)*(x>>32&mask)>>vocabBits]...)
	}
	return dst[:start+n]
}
