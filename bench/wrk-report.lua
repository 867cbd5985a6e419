-- bench/wrk-report.lua: prints one machine-readable line after a wrk run so
-- that bench/*.sh need not parse wrk's human output. Times are in
-- microseconds; "status" counts non-2xx/3xx answers (wrk's "Non-2xx or 3xx
-- responses"), the other error fields are socket errors.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT requests=%d duration_us=%d bytes=%d rps=%.1f " ..
    "p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%.1f " ..
    "err_connect=%d err_read=%d err_write=%d err_timeout=%d err_status=%d\n",
    summary.requests, summary.duration, summary.bytes,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean,
    e.connect, e.read, e.write, e.timeout, e.status))
end
