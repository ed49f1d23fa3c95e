-- bench/api.lua: the wrk script of `bench/api -generator wrk`.
--
-- Every request is a first send: its own Idempotency-Key (prefix, thread,
-- sequence) and its own recipient, so that no answer is a replay. wrk is
-- written in C and costs far less CPU per request than the Go generator,
-- which matters when both share the two cores with msgq serve.
--
-- Arguments (after --): the key prefix, the file holding the API key.
-- done() prints one JSON line: the statuses counted, the requests, the
-- errors, the duration and the latency percentiles in microseconds; the
-- script checks the store against the count of 202s.

local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  table.insert(threads, thread)
end

function init(args)
  prefix = args[1] .. "-t" .. tid
  local f = assert(io.open(args[2], "r"))
  local key = f:read("*l")
  f:close()
  -- wrk.format takes the headers given in place of wrk.headers.
  auth = "Bearer " .. key
  seq = 0
  statuses = {}
end

function request()
  seq = seq + 1
  -- +1555 and seven digits: the thread, then six of the sequence.
  local to = string.format("+1555%d%06d", tid % 10, seq % 1000000)
  local body = '{"to":"' .. to .. '","identity":"sim","template":{"name":"order_update","language":"en","parameters":["Ada","' .. seq .. '"]}}'
  return wrk.format("POST", "/v1/messages", {
    ["Authorization"] = auth,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. "-" .. seq,
  }, body)
end

function response(status, headers, body)
  local k = tostring(status)
  statuses[k] = (statuses[k] or 0) + 1
end

function done(summary, latency, requests)
  local counts = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for k, v in pairs(s) do
      counts[k] = (counts[k] or 0) + v
    end
  end
  local parts = {}
  for k, v in pairs(counts) do
    table.insert(parts, string.format('"%s":%d', k, v))
  end
  local e = summary.errors
  io.write(string.format(
    '{"statuses":{%s},"requests":%d,"duration_us":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d}}\n',
    table.concat(parts, ","), summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
