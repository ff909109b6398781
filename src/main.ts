/** Wiring: which Layers make up the service for a configuration. Nothing else lives here. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiSwagger from "@effect/platform/HttpApiSwagger"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import { Context, Effect, identity, Layer, ManagedRuntime } from "effect"
import { meteredCalendar, meteredTsa, MetricsServerLive, MetricsListener } from "./Platform/Metrics.js"
import { Api } from "./Api.js"
import { AttestationRepo } from "./Attestations/Repo.js"
import { Attestor } from "./Attestations/Attestor.js"
import { Evidence } from "./Attestations/Evidence.js"
import { PublicReads } from "./Attestations/PublicReads.js"
import { StatusReads } from "./Attestations/StatusReads.js"
import { ReadSql } from "./Platform/ReadSql.js"
import { AttestationsLive, LookupLive, VerificationLive } from "./Attestations/Http.js"
import { AttestationListLive } from "./Attestations/List.js"
import { ApiKeyRepo } from "./Auth/ApiKeyRepo.js"
import { KeyCacheLive } from "./Auth/KeyCache.js"
import { Authenticator } from "./Auth/Authenticator.js"
import { RequestMetas } from "./Auth/RequestMeta.js"
import { AuthenticationLive } from "./Auth/Http.js"
import { Authentication } from "./Auth/Api.js"
import { Quota } from "./Auth/Quota.js"
import { PublicLimit } from "./Auth/PublicLimit.js"
import { RateLimiter } from "./Auth/RateLimiter.js"
import { ApiErrorsLive, makeEdge } from "./Server/Edge.js"
import { DrainLive, makeDrainer } from "./Server/Drain.js"
import { NodeServerLive } from "./Server/Server.js"
import { ownContext } from "./Server/GroupContext.js"
import { HealthChecks } from "./Platform/HealthChecks.js"
import { InfoLive } from "./Info/Http.js"
import { SigningKeys } from "./Platform/SigningKeys.js"
import { VerifierPageLive } from "./Info/VerifierPage.js"
import { AppConfig, type AppConfigShape } from "./Platform/Config.js"
import { DatabaseLive, dialectOf } from "./Platform/Sql.js"
import { makePrivateDir } from "./Platform/PrivateFiles.js"
import { Signer } from "./Platform/Signer.js"
import { TsaClient, layerDemo as TsaDemo, layerHttp as TsaHttp } from "./Platform/Tsa/TsaClient.js"
import { ProofsLive } from "./Sealing/Http.js"
import { AnchorsLive, SimulatedChainLive } from "./Anchoring/Http.js"
import { AnchoringRepo } from "./Anchoring/Repo.js"
import { ShareTokenRepo } from "./Auth/ShareTokenRepo.js"
import { ShareTokensLive } from "./ShareTokens/Http.js"
import { ClaimsLive } from "./Claims/Http.js"
import { ClaimRepo } from "./Claims/Repo.js"
import { TagsLive } from "./Tags/Http.js"
import { TagRepo } from "./Tags/Repo.js"
import { WebhooksLive } from "./Webhooks/Http.js"
import { WebhookRepo } from "./Webhooks/Repo.js"
import { WebhookDispatcher } from "./Webhooks/Dispatcher.js"
import { CensusLive, DerivedListsPublicLive } from "./Census/Http.js"
import { CensusRepo } from "./Census/Repo.js"
import { DerivedListGatesLive } from "./Census/ListGate.js"
import { BrandLive } from "./Brand/Http.js"
import { BrandRepo } from "./Brand/Repo.js"
import { Anchorer } from "./Anchoring/Anchorer.js"
import { AnchorProofs } from "./Anchoring/Proofs.js"
import { layerHttp as CalendarHttp, OtsCalendar } from "./Platform/Calendar/OtsCalendar.js"
import { layerSimulatedChain, SimulatedChain } from "./Platform/Calendar/SimulatedChain.js"
import { layerEsplora, layerNone as NoBitcoinSources, type BitcoinHeaderSources } from "./Platform/Bitcoin/HeaderSources.js"
import * as SqlClient from "@effect/sql/SqlClient"
import { Duration } from "effect"
import { SealingRepo } from "./Sealing/Repo.js"
import { Sealer } from "./Sealing/Sealer.js"
import { SealedEvidenceLive } from "./Sealing/Evidence.js"
import { AnchoredEvidenceLive } from "./Anchoring/Evidence.js"
import { readFileSync } from "node:fs"
import { parseTrustAnchors } from "./Platform/Tsa/Rfc3161.js"
import { Option } from "effect"
import { ClockDiscipline } from "./Timestamping/Clock.js"
import { ClockMonitorLive } from "./Timestamping/ClockMonitor.js"
import { TimestampingLive } from "./Timestamping/Http.js"
import { TimestampAuthority } from "./Timestamping/Authority.js"
import { TimestampRepo } from "./Timestamping/Repo.js"

export interface ServeOptions {
  readonly migrate?: boolean
  readonly http?: boolean
  readonly workers?: boolean
}

export { DatabaseLive } from "./Platform/Sql.js"

/** The TSA: the configured RFC 3161 servers, or the embedded demo TSA. */
export const TsaLive = (config: AppConfigShape): Layer.Layer<TsaClient> =>
  Layer.map(TsaUnmetered(config), (ctx) => Context.add(ctx, TsaClient, meteredTsa(Context.get(ctx, TsaClient))))

const TsaUnmetered = (config: AppConfigShape): Layer.Layer<TsaClient> =>
  config.tsaUrls.length > 0
    ? Layer.unwrapEffect(Effect.try({
      try: () => {
        const pem = Option.getOrUndefined(Option.map(config.tsaCaFile, (f) => readFileSync(f, "utf8")))
        if (pem !== undefined) parseTrustAnchors(pem) // refuse to start on unusable anchors
        return TsaHttp({ urls: config.tsaUrls, trustAnchorsPem: pem })
      },
      catch: (e) =>
        new Error(`ATTESTD_TSA_CA_FILE ${Option.getOrElse(config.tsaCaFile, () => "")}: ${e instanceof Error ? e.message : String(e)}`)
    })).pipe(Layer.orDie)
    : Layer.orDie(TsaDemo(config.dataDir))

/**
 * The OpenTimestamps calendars (metered) and Bitcoin header sources: the
 * configured ones, or the embedded simulated calendar whose chain (in the
 * database) is also the header source. Configured calendars without sources
 * reach no T2 (demo only; production refuses to start without sources).
 */
export const CalendarLive = (
  config: AppConfigShape
): Layer.Layer<OtsCalendar | BitcoinHeaderSources, never, SqlClient.SqlClient> => {
  const sources = config.bitcoinSources.length > 0 ? layerEsplora({ sources: config.bitcoinSources }) : NoBitcoinSources
  const simulated = layerSimulatedChain({ confirmDelayMs: Duration.toMillis(config.demoConfirmDelay) })
  const calendars = config.otsCalendars.length > 0
    ? Layer.merge(CalendarHttp({ urls: config.otsCalendars }), sources)
    // Configured sources take the place of the simulated chain as header source (the later layer wins).
    : config.bitcoinSources.length > 0 ? Layer.merge(simulated, sources) : simulated
  return Layer.map(calendars, (ctx) => Context.add(ctx, OtsCalendar, meteredCalendar(Context.get(ctx, OtsCalendar))))
}

/** What the public reads read through (Attestations/PublicReads.ts), over whichever database provides SqlClient. */
const PublicReadSide = Layer.mergeAll(AttestationRepo.Default, Evidence.Default, SigningKeys.Default).pipe(
  Layer.provide(Layer.merge(SealedEvidenceLive, AnchoredEvidenceLive))
)

/**
 * The clock the RFC 3161 authority stamps tokens with: disciplined by SNTP when
 * ATTESTD_NTP_SERVERS names servers, else unmonitored (taken as trusted).
 */
export const ClockLive = ({ timestamping: t }: AppConfigShape) =>
  t.ntpServers.length === 0
    ? ClockDiscipline.unmonitored(t.clockToleranceMs)
    : ClockMonitorLive({ servers: t.ntpServers, interval: t.ntpInterval, toleranceMs: t.clockToleranceMs }).pipe(Layer.provide(HealthChecks.Default))

/**
 * Domain services over the database, signer, TSA, calendars and clock. Each
 * `Default` layer brings the services it depends on; a layer named in several
 * places is built once (layers are memoized by reference within one runtime).
 * The repositories and keys listed here are the ones the handlers use directly.
 */
export const ServicesLive = (config: AppConfigShape) =>
  StatusReads.Default.pipe(Layer.provideMerge(PublicReads.layer(PublicReadSide)), Layer.provideMerge(Layer.mergeAll(
    Attestor.Default,
    Evidence.Default,
    Authenticator.Default,
    Quota.Default,
    Sealer.Default,
    Anchorer.Default,
    WebhookDispatcher.Default,
    AttestationRepo.Default,
    ApiKeyRepo.Default,
    ShareTokenRepo.Default,
    ClaimRepo.Default,
    TagRepo.Default,
    WebhookRepo.Default,
    CensusRepo.Default,
    BrandRepo.Default,
    SealingRepo.Default,
    AnchoringRepo.Default,
    AnchorProofs.Default,
    SigningKeys.Default,
    Signer.Default,
    HealthChecks.Default,
    TimestampRepo.Default,
    TimestampingLayer(config)
  ))).pipe(
    // the tiers of an evidence bundle, from the features that reach them
    Layer.provideMerge(Layer.merge(SealedEvidenceLive, AnchoredEvidenceLive)),
    Layer.provideMerge(Layer.mergeAll(
      ReadSql.layer(config),
      TsaLive(config),
      CalendarLive(config),
      // one public limit (its memory of full windows) over the one limiter
      PublicLimit.Default.pipe(Layer.provideMerge(dialectOf(config.databaseUrl) === "pg" ? RateLimiter.sql : RateLimiter.memory)),
      KeyCacheLive(config),
      ClockLive(config),
      RequestMetas.Default
    ))
  )

/** The RFC 3161 time-stamping authority: off (404), or on under the clock discipline. */
const TimestampingLayer = (config: AppConfigShape) =>
  config.timestamping.enabled
    ? TimestampAuthority.layer.pipe(Layer.provide(Layer.mergeAll(Attestor.Default, Signer.Default, TimestampRepo.Default, HealthChecks.Default)))
    : TimestampAuthority.disabled

/** The HTTP API (without a listening server). */
export const HttpApiLive = Layer.mergeAll(
  HttpApiSwagger.layer({ path: "/docs" }),
  HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" }),
  VerifierPageLive,
  ApiErrorsLive
).pipe(
  Layer.provideMerge(
    HttpApiBuilder.api(Api).pipe(
      Layer.provide([
        ownContext(AttestationsLive, Authentication, Attestor, Quota),
        ownContext(VerificationLive, PublicReads, StatusReads, RequestMetas, PublicLimit, Authenticator),
        ownContext(LookupLive, PublicReads),
        ownContext(AttestationListLive, SqlClient.SqlClient, Authentication),
        ownContext(ProofsLive, AttestationRepo, SealingRepo),
        ownContext(AnchorsLive, AttestationRepo, OtsCalendar, AnchorProofs),
        // optional (demo mode only): read with serviceOption, so not in the layer's type
        ownContext(SimulatedChainLive, SimulatedChain),
        ownContext(ClaimsLive, ShareTokenRepo, Authentication, AttestationRepo, RequestMetas, ClaimRepo),
        ownContext(TagsLive, ShareTokenRepo, Authentication, AttestationRepo, RequestMetas, ClaimRepo, TagRepo),
        ownContext(ShareTokensLive, ShareTokenRepo, Authentication, AttestationRepo, ClaimRepo),
        ownContext(WebhooksLive, AppConfig, Authentication, WebhookRepo),
        ownContext(CensusLive, AppConfig, Authentication, Signer, RateLimiter, CensusRepo),
        ownContext(DerivedListsPublicLive, RequestMetas, RateLimiter, CensusRepo),
        ownContext(BrandLive, BrandRepo),
        ownContext(InfoLive, AppConfig, SigningKeys, Signer, HealthChecks, AttestationRepo, PublicReads, TsaClient, ClockDiscipline),
        ownContext(TimestampingLive, AppConfig, AttestationRepo, Evidence, RequestMetas, Authenticator, Quota, TimestampRepo, TimestampAuthority),
      ]),
      Layer.provide(AuthenticationLive)
    )
  )
)

/** The background fibers: sealer (and later anchorer, OTS upgrader, webhook dispatcher). */
export const WorkersLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sealer = yield* Sealer
    const anchorer = yield* Anchorer
    yield* Effect.forkScoped(sealer.run)
    const dispatcher = yield* WebhookDispatcher
    yield* Effect.forkScoped(anchorer.run)
    yield* Effect.forkScoped(dispatcher.run)
  })
)

/** The data dir (signing keys, the demo TSA, the SQLite file): made 0700 before anything is written there. */
const DataDirLive = (config: AppConfigShape) => Layer.effectDiscard(Effect.try(() => makePrivateDir(config.dataDir)).pipe(Effect.orDie))

/** Services, database and configuration, plus the background workers unless disabled. */
export const AppLive = (config: AppConfigShape, options: ServeOptions = {}) =>
  (options.workers === false ? Layer.empty : WorkersLive).pipe(
    Layer.provideMerge(ServicesLive(config)),
    Layer.provideMerge(DatabaseLive(config, { migrate: options.migrate ?? true })),
    Layer.provideMerge(DataDirLive(config)),
    Layer.provideMerge(Layer.succeed(AppConfig, config))
  )

/** The HTTP server on the configured address, over AppLive. */
export const ServerLive = (config: AppConfigShape, options: ServeOptions = {}) => {
  const tracing = process.env.ATTESTD_TRACING === "1"
  const drainer = makeDrainer()
  const api = Layer.unwrapEffect(Effect.map(makeEdge, (edge) => HttpApiBuilder.serve(edge)))
  const http = DrainLive(drainer).pipe(Layer.provideMerge(api.pipe(
    Layer.provide(HttpApiLive),
    Layer.provide(DerivedListGatesLive),
    HttpServer.withLogAddress,
    Layer.provideMerge(NodeServerLive({
      port: config.port,
      host: config.host,
      drainer,
      limits: { server: config.server, trustProxy: config.trustProxy }
    }))
  )))
  // Tracing is opt-in (ATTESTD_TRACING=1): off, no request or SQL statement opens a span.
  const served = tracing ? http : HttpMiddleware.withTracerDisabledWhen(http, () => true)
  return Layer.merge(served, MetricsServerLive).pipe(
    Layer.provideMerge(AppLive(config, options)),
    tracing ? identity : Layer.provide(Layer.setTracerEnabled(false))
  )
}

/** Starts a server in this process (tests, benchmarks); resolves with its base URL. */
export const startServer = async (config: AppConfigShape, options: ServeOptions = {}) => {
  const runtime = ManagedRuntime.make(ServerLive(config, options))
  const server = await runtime.runPromise(HttpServer.HttpServer)
  const address = server.address
  const url = address._tag === "TcpAddress" ? `http://${address.hostname === "::" ? "127.0.0.1" : address.hostname}:${address.port}` : ""
  const metrics = await runtime.runPromise(MetricsListener)
  const metricsUrl = Option.match(metrics.port, { onNone: () => undefined, onSome: (port) => `http://${config.host}:${port}/metrics` })
  return { url, metricsUrl, runtime, close: () => runtime.dispose() }
}
