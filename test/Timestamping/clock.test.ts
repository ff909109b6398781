/**
 * Clock discipline (CONTRACT §6) against real SNTP servers on UDP (test/helpers/sntpServer.ts):
 * the packet codec, the quorum rule (more than half answer, |median offset| + half the median
 * round trip ≤ tolerance) over live polls of three servers that are honest, lie, fall silent
 * or answer late; the poller's schedule and its automatic recovery driven by a TestClock;
 * what an in-process server shows (healthz `checks.clock`, /v1/info `clock`, the
 * attestd_clock_* gauges) while its servers lie and after; and ATTESTD_NTP_* parsing.
 */
import { it as effectIt } from "@effect/vitest"
import { Chunk, ConfigProvider, Duration, Effect, Either, Option, TestClock } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { AppConfig, appConfig, type NtpServer, parseNtpServer } from "../../src/Platform/Config.js"
import { judge, makeClockMonitor, NOT_YET_CHECKED } from "../../src/Timestamping/ClockMonitor.js"
import { decodeReply, encodeRequest, ntpTimestamp, type SntpSample, unixMillisOf } from "../../src/Timestamping/Sntp.js"
import { client, startTestServer, type TestServer } from "../helpers/server.js"
import { waitFor } from "../helpers/process.js"
import { type SntpBehaviour, type SntpTestServer, startSntpServer } from "../helpers/sntpServer.js"

const started: Array<SntpTestServer> = []
afterAll(async () => {
  for (const s of started) await s.close()
})

const three = async (behaviours: ReadonlyArray<Partial<SntpBehaviour>>) => {
  const servers = await Promise.all(behaviours.map((b) => startSntpServer(b)))
  started.push(...servers)
  return { servers, config: servers.map((s): NtpServer => ({ host: "127.0.0.1", port: s.port })) }
}

const sample = (offsetMs: number, roundTripMs = 2): SntpSample => ({ server: "s", offsetMs, roundTripMs, stratum: 1 })

describe("the SNTP packet", () => {
  it("an NTP timestamp round-trips within 16 µs (the noise bits), in era 0 and after the 2036 wrap", () => {
    for (const ms of [0, 1_767_225_600_123, Date.UTC(2036, 1, 7, 6, 28, 15, 999), Date.UTC(2040, 0, 1, 0, 0, 0, 250)]) {
      const packet = new Uint8Array(48)
      packet.set(ntpTimestamp(ms), 40)
      expect(Math.abs(unixMillisOf(packet, 40) - ms)).toBeLessThan(0.016)
    }
    // 2040 lies in era 1: the 32-bit seconds wrapped, so the top bit is clear
    expect(ntpTimestamp(Date.UTC(2040, 0, 1))[0]! & 0x80).toBe(0)
    // the noise stays in the lowest 16 fraction bits
    expect(Array.from(ntpTimestamp(1000, 0xffff).subarray(6))).toEqual([0xff, 0xff])
  })

  it("a reply counts only when it answers this request from a synchronised server", () => {
    const sent = ntpTimestamp(1_767_225_600_000, 7)
    const reply = (patch: (p: Uint8Array) => void) => {
      const p = new Uint8Array(48)
      p[0] = 0x24
      p[1] = 2
      p.set(sent, 24)
      p.set(ntpTimestamp(1_767_225_601_000), 32)
      p.set(ntpTimestamp(1_767_225_601_000), 40)
      patch(p)
      return p
    }
    expect(encodeRequest(sent)[0]).toBe(0x23)
    expect(decodeReply(reply(() => {}), sent)).toMatchObject({ stratum: 2, receiveMs: 1_767_225_601_000, transmitMs: 1_767_225_601_000 })
    expect(decodeReply(reply((p) => (p[0] = 0x23)), sent)).toMatch(/not a server reply/)
    expect(decodeReply(reply((p) => (p[31] = p[31]! ^ 1)), sent)).toMatch(/does not answer this request/)
    expect(decodeReply(reply((p) => ((p[1] = 0), p.set([0x44, 0x45, 0x4e, 0x59], 12))), sent)).toBe("kiss-o'-death DENY")
    expect(decodeReply(reply((p) => (p[0] = 0xe4)), sent)).toMatch(/not synchronised/)
    expect(decodeReply(reply((p) => p.fill(0, 40)), sent)).toMatch(/no receive or transmit/)
    expect(decodeReply(reply(() => {}).subarray(0, 47), sent)).toMatch(/47-byte/)
  })
})

describe("the quorum rule", () => {
  it("trusted within the tolerance; the median outvotes one liar; a bound equal to the tolerance passes", () => {
    expect(judge(3, [sample(3), sample(-2), sample(1)], 1000, 0)).toMatchObject({ _tag: "Trusted", offsetMs: 1, halfRoundTripMs: 1 })
    expect(judge(3, [sample(0), sample(4), sample(90_000)], 1000, 0)).toMatchObject({ _tag: "Trusted", offsetMs: 4 })
    expect(judge(1, [sample(-900, 200)], 1000, 0)).toMatchObject({ _tag: "Trusted" })
    // two middle values of an even count are averaged
    expect(judge(4, [sample(0), sample(10), sample(20), sample(5000)], 1000, 0)).toMatchObject({ _tag: "Trusted", offsetMs: 15 })
  })

  it("untrusted when the median lies, when half or fewer answer, when the round trip is large", () => {
    expect(judge(3, [sample(0), sample(5000), sample(5001)], 1000, 7)).toEqual({
      _tag: "Untrusted",
      offsetMs: 5000,
      reason: "|median offset| 5000 ms + half the round trip 1 ms exceeds the tolerance 1000 ms",
      checkedAtMillis: 7
    })
    expect(judge(3, [sample(0)], 1000, 0)).toMatchObject({ _tag: "Untrusted", offsetMs: 0, reason: "1 of 3 NTP servers answered; more than half must" })
    expect(judge(4, [sample(0), sample(0)], 1000, 0)).toMatchObject({ _tag: "Untrusted", reason: /2 of 4/ })
    expect(judge(2, [], 1000, 0)).toMatchObject({ _tag: "Untrusted", offsetMs: null, reason: "none of the 2 NTP server(s) answered" })
    expect(judge(3, [sample(100, 1900), sample(100, 2000), sample(0, 2100)], 1000, 0)).toMatchObject({ _tag: "Untrusted", reason: /half the round trip 1000 ms/ })
  })
})

const pollOnce = (servers: ReadonlyArray<NtpServer>, toleranceMs = 1000, queryTimeout: Duration.DurationInput = "1 second") =>
  Effect.runPromise(Effect.flatMap(
    makeClockMonitor({ servers, interval: Duration.hours(1), toleranceMs, queryTimeout }),
    (m) => Effect.zip(m.poll, m.check)
  ))

describe("polls of three SNTP servers over UDP (live clock)", () => {
  it.concurrent("three honest servers: trusted, offset near 0", async () => {
    const { config } = await three([{}, {}, {}])
    const [state, check] = await pollOnce(config)
    expect(state._tag).toBe("Trusted")
    expect(check).toMatchObject({ status: "ok", tolerance_ms: 1000 })
    // each server stamps between our send and our receive: off by at most its half round trip (milliseconds here)
    expect(Math.abs(check.offset_ms!)).toBeLessThan(500)
    expect(check).not.toHaveProperty("reason")
  })

  it.concurrent("two of three lie by 5 s: untrusted, with the liars' median offset", async () => {
    const { config } = await three([{}, { offsetMs: 5000 }, { offsetMs: 5200 }])
    const [state, check] = await pollOnce(config)
    expect(state).toMatchObject({ _tag: "Untrusted", reason: /exceeds the tolerance 1000 ms/ })
    expect(check.status).toBe("degraded")
    expect(Math.abs(check.offset_ms! - 5000)).toBeLessThan(500)
  })

  it.concurrent("one liar of three is outvoted", async () => {
    const { config } = await three([{}, {}, { offsetMs: -60_000 }])
    expect((await pollOnce(config))[0]._tag).toBe("Trusted")
  })

  it.concurrent("only one of three answers (one silent, one kiss-o'-death): not more than half, untrusted", async () => {
    const { config } = await three([{}, { mode: "silent" }, { mode: "kiss" }])
    const [state] = await pollOnce(config)
    expect(state).toMatchObject({ _tag: "Untrusted", reason: "1 of 3 NTP servers answered; more than half must" })
  })

  it.concurrent("replies that do not answer the request, or from unsynchronised servers, do not count", async () => {
    const { config } = await three([{}, { mode: "wrongOriginate" }, { mode: "unsynchronised" }])
    expect((await pollOnce(config))[0]).toMatchObject({ _tag: "Untrusted", reason: /1 of 3/ })
  })

  it.concurrent("a round trip of about 800 ms against a tolerance of 200 ms: untrusted", async () => {
    const { config } = await three([{ delayMs: 800 }, { delayMs: 800 }, { delayMs: 800 }])
    const [state, check] = await pollOnce(config, 200, "3 seconds")
    expect(state).toMatchObject({ _tag: "Untrusted", reason: /half the round trip .* exceeds the tolerance 200 ms/ })
    expect(check.half_round_trip_ms).toBeGreaterThan(200)
  })
})

/** Waits, in real time (replies travel over real UDP), until the poller sleeps until `wakeAt` on the TestClock. */
const sleepingUntil = (wakeAt: number) =>
  Effect.gen(function*() {
    while (!Chunk.some(yield* TestClock.sleeps(), (at) => at === wakeAt)) {
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
    }
  })

describe("the poller on a TestClock", () => {
  effectIt.scoped("not yet checked until the first poll ends; polls every interval; recovers by itself", () =>
    Effect.gen(function*() {
      const { servers, config } = yield* Effect.promise(() => three([{ mode: "silent", base: "echo" }, { mode: "silent", base: "echo" }, { mode: "silent", base: "echo" }]))
      const monitor = yield* makeClockMonitor({ servers: config, interval: Duration.seconds(64), toleranceMs: 1000 })
      yield* Effect.forkScoped(monitor.run)
      const queried = (n: number) => Effect.promise(() => waitFor(`${n} queries per server`, () => servers.every((s) => s.queries === n)))
      // read on the test's clock (the verdict's age is measured on it), waiting in real time
      const stateAfter = (checkedAt: number) =>
        Effect.gen(function*() {
          for (let i = 0; i < 3000; i++) {
            const s = yield* monitor.discipline.state
            if (s._tag !== "Unmonitored" && s.checkedAtMillis === checkedAt) return s
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
          }
          throw new Error(`no verdict at ${checkedAt}`)
        })

      // the first poll starts at once; silent servers keep it open until the 2 s timeout
      yield* queried(1)
      expect(yield* monitor.discipline.state).toEqual({ _tag: "Untrusted", offsetMs: null, reason: NOT_YET_CHECKED, checkedAtMillis: null })
      yield* TestClock.adjust("2 seconds")
      expect(yield* stateAfter(2000)).toMatchObject({ _tag: "Untrusted", reason: "none of the 3 NTP server(s) answered" })
      yield* sleepingUntil(66_000)

      // lying servers, asked 64 s after the last poll ended
      for (const s of servers) s.set({ mode: "answer", offsetMs: 5000 })
      yield* TestClock.adjust("63 seconds")
      expect(servers.map((s) => s.queries)).toEqual([1, 1, 1])
      yield* TestClock.adjust("1 second")
      yield* queried(2)
      const lying = yield* stateAfter(66_000)
      expect(lying).toMatchObject({ _tag: "Untrusted", reason: /exceeds the tolerance/ })
      expect(lying._tag === "Untrusted" && Math.round(lying.offsetMs!)).toBe(5000)
      yield* sleepingUntil(130_000)

      // honest again: the next poll trusts the clock, no one intervenes
      for (const s of servers) s.set({ offsetMs: 10 })
      yield* TestClock.adjust("64 seconds")
      const recovered = yield* stateAfter(130_000)
      expect(recovered).toMatchObject({ _tag: "Trusted", halfRoundTripMs: 0 })
      expect(recovered._tag === "Trusted" && Math.round(recovered.offsetMs)).toBe(10)
    }))
})

describe("a stopped poller", () => {
  effectIt.scoped("a trusted verdict older than two intervals and a poll is no longer trusted", () =>
    Effect.gen(function*() {
      const { config } = yield* Effect.promise(() => three([{ base: "echo" }, { base: "echo" }, { base: "echo" }]))
      const monitor = yield* makeClockMonitor({ servers: config, interval: Duration.seconds(10), toleranceMs: 1000 })
      expect((yield* monitor.poll)._tag).toBe("Trusted")
      yield* TestClock.adjust("22 seconds")
      expect((yield* monitor.discipline.state)._tag).toBe("Trusted")
      yield* TestClock.adjust("1 millis")
      expect(yield* monitor.discipline.state).toMatchObject({ _tag: "Untrusted", reason: /more than two intervals ago/ })
      expect(yield* monitor.check).toMatchObject({ status: "degraded", reason: /more than two intervals ago/ })
    }))
})

describe("what an in-process server shows", () => {
  const servers: Array<TestServer> = []
  afterAll(async () => {
    for (const s of servers) await s.close()
  })

  it("lying servers: healthz 200 with checks.clock degraded and its offset, info untrusted, gauges; honest again: ok", async () => {
    const { servers: ntp, config } = await three([{}, { offsetMs: 5000 }, { offsetMs: 5000 }])
    const server = await startTestServer("sqlite", {
      timestamping: { ...AppConfig.make().timestamping, ntpServers: config, ntpInterval: Duration.millis(200), clockToleranceMs: 500 },
      metricsPort: Option.some(0)
    })
    servers.push(server)
    const api = client(server.url)
    const degraded = await waitFor("checks.clock degraded", async () => {
      const r = await api.get("/v1/healthz")
      return r.body?.checks?.clock?.status === "degraded" && r.body.checks.clock.checked_at !== null ? r : undefined
    })
    expect(degraded.status).toBe(200)
    expect(degraded.body.status).toBe("degraded")
    expect(degraded.body.checks).toMatchObject({ database: "ok", signer: "ok" })
    const clock = degraded.body.checks.clock
    expect(Object.keys(clock).sort()).toEqual(["checked_at", "half_round_trip_ms", "offset_ms", "reason", "status", "tolerance_ms"])
    expect(Math.abs(clock.offset_ms - 5000)).toBeLessThan(500)
    expect(clock).toMatchObject({ tolerance_ms: 500, reason: /exceeds the tolerance 500 ms/ })
    expect((await api.get("/v1/info")).body.clock).toBe("untrusted")
    const metrics = await (await fetch(server.metricsUrl!)).text()
    expect(metrics).toMatch(/^# TYPE attestd_clock_offset_seconds gauge$/m)
    expect(metrics).toMatch(/^attestd_clock_trusted 0$/m)
    expect(metrics).toMatch(/^attestd_clock_servers_answered 3$/m)
    expect(Number(/^attestd_clock_offset_seconds (\S+)$/m.exec(metrics)![1])).toBeGreaterThan(4.5)

    for (const s of ntp) s.set({ offsetMs: 0 })
    const ok = await waitFor("checks.clock ok", async () => {
      const r = await api.get("/v1/healthz")
      return r.body?.checks?.clock?.status === "ok" ? r : undefined
    })
    expect(ok.body.status).toBe("ok")
    expect(ok.body.checks.clock).not.toHaveProperty("reason")
    expect((await api.get("/v1/info")).body.clock).toBe("disciplined")
    expect(await (await fetch(server.metricsUrl!)).text()).toMatch(/^attestd_clock_trusted 1$/m)
  })

  it("without NTP servers: info says unmonitored and healthz has no clock check", async () => {
    const server = await startTestServer("sqlite")
    servers.push(server)
    const api = client(server.url)
    expect((await api.get("/v1/info")).body.clock).toBe("unmonitored")
    const health = await api.get("/v1/healthz")
    expect(health.body.status).toBe("ok")
    expect(health.body.checks).not.toHaveProperty("clock")
  })
})

describe("ATTESTD_NTP_* settings", () => {
  const load = (env: Record<string, string>) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))

  it("host[:port] lists, IPv6 in brackets, default port 123; the defaults", () => {
    const c = load({ ATTESTD_NTP_SERVERS: " time.example , 10.0.0.1:1123,[2001:db8::1]:4123,[::1]" })
    expect(Either.getOrThrow(c).timestamping.ntpServers).toEqual([
      { host: "time.example", port: 123 },
      { host: "10.0.0.1", port: 1123 },
      { host: "2001:db8::1", port: 4123 },
      { host: "::1", port: 123 }
    ])
    const d = Either.getOrThrow(load({}))
    expect(d.timestamping.ntpServers).toEqual([])
    expect(Duration.toMillis(d.timestamping.ntpInterval)).toBe(64_000)
    expect(d.timestamping.clockToleranceMs).toBe(1000)
  })

  it("a bad entry names the variable and the entry", () => {
    expect(parseNtpServer("time.example:0")).toBe("time.example:0: the port must be 1..65535")
    expect(parseNtpServer("2001:db8::1")).toMatch(/IPv6 address goes in brackets/)
    expect(parseNtpServer("bad_host:123")).toMatch(/is not a host name or address/)
    expect(parseNtpServer("host:12x")).toMatch(/not host\[:port\]/)
    const message = (env: Record<string, string>) => {
      const r = load(env)
      return Either.isLeft(r) ? String(r.left) : "accepted"
    }
    expect(message({ ATTESTD_NTP_SERVERS: "a.example,b.example:99999" })).toMatch(/ATTESTD_NTP_SERVERS.*b\.example:99999: the port must be 1\.\.65535/)
    expect(message({ ATTESTD_NTP_SERVERS: "a.example,A.example:123" })).toMatch(/A\.example:123 is listed twice/)
    expect(message({ ATTESTD_NTP_INTERVAL: "often" })).toMatch(/ATTESTD_NTP_INTERVAL.*expected a duration/)
    expect(message({ ATTESTD_CLOCK_TOLERANCE: "0s" })).toMatch(/ATTESTD_CLOCK_TOLERANCE/)
  })
})
