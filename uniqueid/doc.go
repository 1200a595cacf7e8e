// Package uniqueid makes, parses and serves request IDs compatible with the
// UNIQUE_ID tokens of Apache httpd's mod_unique_id, so that Go services
// running beside or behind Apache produce, accept and dissect the same
// tokens. It depends on the standard library only.
//
// # Layouts
//
// Two layouts exist in the wild. Both are big-endian binary records encoded
// three bytes to four characters, like base64 without padding; Parse tells
// them apart by length and alphabet.
//
// Classic, the layout of the mod_unique_id documentation, is 18 bytes and
// 24 characters from the alphabet A-Z a-z 0-9 @ - (so '@' is 62 and '-' is
// 63):
//
//	bytes  0-3   timestamp, seconds since 1970 (the request's arrival second)
//	bytes  4-7   IPv4 address of the machine
//	bytes  8-11  process ID
//	bytes 12-13  counter
//	bytes 14-17  thread index
//
// For example, the token ZVPxAMAAAgoAABCSEjQAAAAH is 2023-11-14T22:13:20Z,
// address 192.0.2.10, PID 4242, counter 4660, thread index 7.
//
// Current, the layout Apache httpd 2.4 emits today (verified against
// Apache/2.4.71 by this package's tests), is 20 bytes and 27 characters of
// URL-safe base64 without padding, alphabet A-Z a-z 0-9 - _ (so '-' is 62
// here and '_' is 63). The two unused low bits of the 27th character are
// zero; Parse rejects a token in which they are not, since it could not be
// re-encoded to the same text:
//
//	bytes  0-3   timestamp, seconds since 1970
//	bytes  4-13  root: 10 random bytes, fixed per process
//	bytes 14-15  counter
//	bytes 16-19  thread index (httpd: the connection ID)
//
// For example, ZVPxAI86UcIH5JttIKoSNAAAAAc is 2023-11-14T22:13:20Z, root
// 8f3a51c207e49b6d20aa, counter 4660, thread index 7.
//
// Parse returns a Token whose String method gives back the parsed text byte
// for byte. Malformed input yields an error wrapping ErrMalformed.
//
// # Uniqueness
//
// A token is unique when no two tokens share all their fields. The
// generators, ClassicGenerator and CurrentGenerator, split the fields in
// two parts:
//
//   - The process identity: IPv4 address and process ID (Classic) or the
//     random root (Current). It is fixed for the life of the process and
//     shared by all generators of that layout in the process.
//   - The counter and the thread index, 48 bits together, which come from
//     one process-wide atomic sequence per layout: each token takes the next
//     number n of the sequence, and the counter is n modulo the counter's
//     period while the thread index is the quotient. Go has no stable thread
//     identity, so rather than pretending to have one, the thread index
//     extends the counter: when the counter wraps, the thread index
//     advances. The period is 65536 for Classic, as documented for
//     mod_unique_id, and 65535 for Current, because httpd 2.4 computes its
//     counter modulo 65535 and never emits 65535 (observed with
//     Apache/2.4.71, where the counter of a child goes 65533, 65534, 0, 1).
//
// Within one process, therefore, two tokens cannot be equal unless about
// 2^48 tokens (nine years at a million tokens per second) separate them,
// and then only if the clock shows the same second for both. This holds at any
// request rate, well beyond the 65,536 tokens per second per process that a
// bare 16-bit counter allows, and for any number of goroutines and
// generators, since every number is taken with a single atomic addition.
// The timestamp plays no part in uniqueness within a process; it serves to
// separate a process from its predecessors with the same identity, and to
// tell when the request arrived.
//
// Classic processes start their counter at the current microseconds divided
// by ten, modulo 65536, as mod_unique_id does, and their thread index at a
// random value. Current processes start their counter at a random value, as
// httpd does, and their thread index at zero.
//
// # Cluster assumptions
//
// Tokens from different processes differ because their process identities
// differ, which requires:
//
//   - Classic: no two machines of the cluster share the IPv4 address that
//     their generators use (configure it explicitly on hosts with several
//     interfaces, or where containers share an address), and on one machine
//     no two running processes share a PID, which the OS guarantees, except
//     across PID namespaces: containers that share an IP address, each with
//     its service as PID 1, would collide and need distinct configured
//     addresses. A process that reuses the address and PID of one that ran
//     before it can repeat that process's tokens only for a second in which
//     both ran and for overlapping sequence numbers; the random starting
//     thread index makes that improbable.
//   - Current: the 80-bit roots of the processes differ, which holds with
//     overwhelming probability because each is drawn from crypto/rand; no
//     configuration is needed, even across restarts and containers.
//   - Both: the clocks of the machines are kept in sync (NTP), so that
//     timestamps mean the same second everywhere, and tokens from outside
//     this package (httpd) follow their own rules: httpd 2.4 relies on its
//     random roots, classic httpd on distinct addresses and at most 65,536
//     requests per second per child.
//
// # Clock steps
//
// The timestamp is read from the wall clock for every token and is not
// monotonic. If the clock steps backwards, tokens of a running process
// repeat earlier timestamps but remain unique, because the sequence never
// goes back. What a backward step can do is bring a process's timestamps
// into seconds in which a predecessor with the same Classic identity was
// running; that risk is the restart risk above, bounded the same way, and
// does not exist for the Current layout. A clock that steps forwards is
// harmless. Tokens are not ordered by time and should not be sorted as if
// they were.
//
// # HTTP
//
// Middleware gives every request of a net/http server a token (or any other
// ID, such as a Randflake ID, through the Source interface), stores it in the
// request context (FromContext), sets it as a response header and, on
// request, trusts a validated token that a front end such as Apache
// forwarded. CGIHandler exposes it to CGI programs as UNIQUE_ID, as
// mod_unique_id does.
//
// Header names that differ only by ASCII case, '-' and '_' are one name to
// a CGI program: net/http/cgi exports a request header as HTTP_ followed
// by its name upper-cased with '-' mapped to '_', so Unique-Id, Unique_id
// and UNIQUE-ID all become HTTP_UNIQUE_ID, and whichever comes last wins.
// A client could therefore slip its own value in beside the real ID. To
// prevent that, Middleware deletes every request header whose name
// normalises that way to the same variable as the token header (or the
// trusted incoming header) but is not that exact header, and trusts only
// the exact canonical header; Unique__Id (HTTP_UNIQUE__ID) is a different
// name and is kept. CGIHandler, with or without Middleware, passes the
// program no header that becomes HTTP_UNIQUE_ID except a single Unique-Id
// holding the request's ID, so HTTP_UNIQUE_ID is that ID or absent; and
// UNIQUE_ID, which no header can set, is the ID whenever the request has
// one.
package uniqueid
