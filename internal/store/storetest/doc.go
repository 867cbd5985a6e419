// Package storetest gives tests real databases: a SQLite file in a temporary
// directory, and a fresh schema in the PostgreSQL cluster that scripts/test
// starts (KILN_TEST_POSTGRES_URL). Without that variable the PostgreSQL half
// skips with one loud line, unless KILN_REQUIRE_POSTGRES=1 (set by CI), in
// which case it fails.
package storetest
