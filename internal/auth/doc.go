// Package auth owns teams and API tokens: their format, issuing, listing,
// revoking, and turning a bearer token into the Principal a request acts as.
//
// Token format (api.md §1.1): "kiln_pat_" (user) or "kiln_agt_" (agent),
// then 36 base62 characters: 30 random ones (≈178 bits from crypto/rand)
// and a 6-character base62 CRC32 (IEEE) of those 30. Parse checks prefix,
// length, alphabet and checksum without touching the database, so a typo or
// a random string costs nothing; secret scanners can recognise the shape.
//
// Only the hex SHA-256 of a whole token is stored. A token is shown once, by
// CreateToken. Authenticate is one indexed read and never writes (no
// "last used" column), so checking a token costs no database write and a
// revocation, done by another process, is seen on the very next request.
//
// It must never log a token or keep one in memory beyond the call that
// produced it; Secret redacts itself in logs.
package auth
