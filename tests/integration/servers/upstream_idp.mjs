// The authorization server of an upstream MCP server, for the sign-in tests (issue 58):
// panva's oidc-provider doing what a person's sign-in needs.
//
//   node tests/integration/servers/upstream_idp.mjs --resource URL [--resource URL ...]
//        [--port PORT] [--redirect-uri URL ...] [--access-ttl SECONDS] [--refresh-ttl SECONDS]
//        [--log FILE] [--state FILE] [--lenient-resource] [--exit-on-stdin-eof]
//
// - Authorization code with PKCE (S256, required of every client) and refresh tokens,
//   rotated on every use; a spent refresh token presented again is refused (invalid_grant)
//   and, as oidc-provider does, revokes the whole grant (every token of that sign-in).
//   Refresh tokens are issued when `offline_access` is granted (asked for, and consented to;
//   asking for it implies prompt=consent, which OpenID Connect would otherwise require).
// - Dynamic Client Registration (RFC 7591), open to anyone; http redirect URIs on loopback
//   are allowed (native clients: any port, RFC 8252). One pre-registered confidential client:
//   `preregistered` / `preregistered-secret`, with the --redirect-uri values.
// - Client ID Metadata Documents (draft-02; oidc-provider's experimental feature): a client_id
//   that is an https URL is fetched as the client's metadata. As the tests serve plain http on
//   loopback, https://127.0.0.1:PORT/... (and localhost) is fetched as http://...
// - Resource indicators (RFC 8707): each --resource (and OTHER_RESOURCE) is a resource server
//   with scopes `orders:read orders:write`; its access tokens are JWTs (RFC 9068, at+jwt)
//   with aud = resource, sub = the login name, client_id, scope, living --access-ttl seconds.
//   The token request must name the resource (as the MCP authorization spec asks), else the
//   access token is an opaque one for userinfo; --lenient-resource uses the granted one instead.
// - `iss` in authorization responses (RFC 9207), revocation (RFC 7009), introspection (RFC 7662).
// - devInteractions: the built-in login page (any name and any password; the name is the
//   account and the sub) and consent page; both have a "[ Cancel ]" link that ends the
//   request with error=access_denied.
//
// --log FILE gets one JSON line per event (see `log` below); tokens appear only as the first
// 16 hex digits of their SHA-256. --state FILE keeps the signing key, cookie keys and every
// stored artefact (clients, grants, refresh tokens, sessions) across restarts, so a restart
// is an outage, not a reset. Once listening it prints one JSON line: {"issuer", "port", ...}.

import { createHash, createPrivateKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    resource: { type: 'string', multiple: true, default: [] },
    'redirect-uri': { type: 'string', multiple: true, default: [] },
    'access-ttl': { type: 'string', default: '600' },
    'refresh-ttl': { type: 'string', default: '86400' },
    log: { type: 'string' },
    state: { type: 'string' },
    'lenient-resource': { type: 'boolean', default: false },
    // Exit when stdin closes, so a test run that dies leaves no provider behind.
    'exit-on-stdin-eof': { type: 'boolean', default: false },
  },
});

if (!args.resource.length) {
  console.error('--resource is required (the protected MCP server\'s URL)');
  process.exit(2);
}
const accessTtl = Number(args['access-ttl']);
const refreshTtl = Number(args['refresh-ttl']);
if (!(accessTtl > 0) || !(refreshTtl > 0)) {
  console.error('--access-ttl and --refresh-ttl must be positive numbers of seconds');
  process.exit(2);
}

// oidc-provider 9 asks for Node 22 LTS at import time; it runs fine on the Node 20 we have;
// that notice and the one that devInteractions are for development only are dropped.
const warn = console.warn;
const quiet = (msg) => typeof msg === 'string'
  && (msg.includes('Unsupported runtime') || msg.includes('devInteractions') || msg.includes('experimental'));
console.warn = (msg, ...rest) => {
  if (!quiet(msg)) warn(msg, ...rest);
};
// The package lives in tests/js/node_modules; ESM ignores NODE_PATH, so import by path.
const { default: Provider, errors } = await import(
  new URL('../../js/node_modules/oidc-provider/lib/index.js', import.meta.url)
);

const OTHER_RESOURCE = 'https://other.invalid/mcp';
const RESOURCES = new Set([...args.resource, OTHER_RESOURCE]);
const RESOURCE_SCOPES = 'orders:read orders:write';

const hash = (token) => (typeof token === 'string' && token
  ? createHash('sha256').update(token).digest('hex').slice(0, 16)
  : null);

function log(event) {
  if (!args.log) return;
  appendFileSync(args.log, `${JSON.stringify({ time: new Date().toISOString(), ...event })}\n`);
}

// State: the key, cookie keys and stores, written through to --state (if given) on every change.
let state = { jwk: null, cookieKeys: null, stores: {} };
if (args.state && existsSync(args.state)) {
  state = JSON.parse(readFileSync(args.state, 'utf8'));
}
if (!state.jwk) {
  // Generated as PEM and read back: exporting the generated KeyObject as a JWK can deadlock
  // Node 20 (a garbage collection during the export runs the finished key job's destructor,
  // which takes the lock the export holds); one start in about a hundred hung for good.
  const { privateKey: pem } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  state.jwk = { ...createPrivateKey(pem).export({ format: 'jwk' }), kid: `k-${randomBytes(4).toString('hex')}`, alg: 'RS256', use: 'sig' };
}
if (!state.cookieKeys) state.cookieKeys = [randomBytes(32).toString('base64url')];

function persist() {
  if (!args.state) return;
  const tmp = `${args.state}.tmp`;
  writeFileSync(tmp, JSON.stringify(state));
  renameSync(tmp, args.state);
}
persist();

class MemoryAdapter {
  constructor(name) {
    state.stores[name] ??= {};
    this.store = state.stores[name];
  }

  async upsert(id, payload, expiresIn) {
    this.store[id] = { payload, expires: expiresIn ? Date.now() + expiresIn * 1000 : null };
    persist();
  }

  async find(id) {
    const hit = this.store[id];
    if (!hit) return undefined;
    if (hit.expires !== null && hit.expires < Date.now()) {
      delete this.store[id];
      persist();
      return undefined;
    }
    return hit.payload;
  }

  async findByUserCode() { return undefined; }

  async findByUid(uid) {
    const id = Object.keys(this.store).find((k) => this.store[k].payload.uid === uid);
    return id === undefined ? undefined : this.find(id);
  }

  async consume(id) {
    const hit = this.store[id];
    if (hit) {
      hit.payload.consumed = Math.floor(Date.now() / 1000);
      persist();
    }
  }

  async destroy(id) {
    delete this.store[id];
    persist();
  }

  // What makes a reused refresh token (and revocation) end the whole sign-in's tokens.
  async revokeByGrantId(grantId) {
    for (const [id, { payload }] of Object.entries(this.store)) {
      if (payload.grantId === grantId) delete this.store[id];
    }
    persist();
  }
}

const isLoopback = (hostname) => ['127.0.0.1', 'localhost', '[::1]'].includes(hostname);

// The port is known only once listening, and the issuer needs it: listen first.
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(args.port), '127.0.0.1', resolve);
});
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  adapter: MemoryAdapter,
  jwks: { keys: [state.jwk] },
  cookies: { keys: state.cookieKeys },
  clients: [{
    client_id: 'preregistered',
    client_secret: 'preregistered-secret',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    redirect_uris: args['redirect-uri'],
    token_endpoint_auth_method: 'client_secret_basic', // client_secret_post is accepted too
  }],
  clientDefaults: {
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'RS256',
  },
  responseTypes: ['code'],
  // The resource's scopes too: a client registering (RFC 7591) names the scopes it will ask for.
  scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES.split(' ')],
  pkce: { required: () => true },
  rotateRefreshToken: true,
  async findAccount(ctx, sub) {
    return { accountId: sub, async claims() { return { sub }; } };
  },
  fetch(url, options) {
    // Client ID Metadata Documents are https URLs; the tests' are served over http on loopback.
    const target = new URL(url);
    if (target.protocol === 'https:' && isLoopback(target.hostname)) {
      target.protocol = 'http:';
      // oidc-provider's SSRF guard refuses loopback addresses, which is all the tests have.
      delete options.dispatcher;
    }
    return fetch(target, options).then((response) => {
      log({ event: 'metadata_document_fetched', url: String(url), status: response.status });
      return response;
    }, (err) => {
      log({ event: 'metadata_document_fetched', url: String(url), error: String(err) });
      throw err;
    });
  },
  features: {
    devInteractions: { enabled: true },
    // Bearer tokens only: the protected server does not check DPoP proofs.
    dPoP: { enabled: false },
    registration: { enabled: true, initialAccessToken: false },
    clientIdMetadataDocument: { enabled: true, ack: 'draft-02' },
    revocation: {
      enabled: true,
      // A client revokes only its own tokens.
      allowedPolicy: async (ctx, client, token) => token.clientId === client.clientId,
    },
    introspection: {
      enabled: true,
      // A client introspects only its own tokens.
      allowedPolicy: async (ctx, client, token) => token.clientId === client.clientId,
    },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => args['lenient-resource'],
      getResourceServerInfo(ctx, resourceIndicator) {
        if (!RESOURCES.has(resourceIndicator)) {
          throw new errors.InvalidTarget(`unknown resource ${resourceIndicator}`);
        }
        return {
          audience: resourceIndicator,
          scope: RESOURCE_SCOPES,
          accessTokenFormat: 'jwt',
          accessTokenTTL: accessTtl,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  ttl: {
    AccessToken: accessTtl,
    AuthorizationCode: 60,
    Grant: refreshTtl,
    IdToken: 600,
    Interaction: 600,
    RefreshToken: refreshTtl,
    Session: refreshTtl,
  },
  // Errors the browser sees, as JSON text (the page text sign_in returns).
  renderError: async (ctx, out) => {
    ctx.type = 'json';
    ctx.body = out;
  },
});

// The event log.
provider.on('registration_create.success', (ctx, client) => log({
  event: 'client_registered',
  client_id: client.clientId,
  application_type: client.applicationType,
  token_endpoint_auth_method: client.clientAuthMethod,
  redirect_uris: client.redirectUris,
}));
provider.on('authorization.success', (ctx) => log({
  event: 'authorized',
  client_id: ctx.oidc.client?.clientId ?? null,
  sub: ctx.oidc.session?.accountId ?? null,
  scope: ctx.oidc.params?.scope ?? null,
  resource: ctx.oidc.params?.resource ?? null,
}));
provider.on('authorization.error', (ctx, err) => log({
  event: 'authorization_failed',
  client_id: ctx.oidc?.client?.clientId ?? null,
  error: err.error,
  error_description: err.error_description,
}));
provider.on('grant.success', (ctx) => {
  const { params, entities } = ctx.oidc;
  log({
    event: 'token_issued',
    grant_type: params.grant_type,
    sub: entities.Account?.accountId ?? null,
    client_id: ctx.oidc.client.clientId,
    scope: ctx.body?.scope ?? null,
    resource: params.resource ?? null,
    access_token: hash(ctx.body?.access_token),
    refresh_spent: params.grant_type === 'refresh_token' ? hash(params.refresh_token) : null,
    refresh_issued: hash(ctx.body?.refresh_token),
  });
});
provider.on('grant.error', (ctx, err) => {
  const params = ctx.oidc?.params ?? {};
  log({
    event: params.grant_type === 'refresh_token' ? 'refresh_rejected' : 'token_rejected',
    grant_type: params.grant_type ?? null,
    client_id: ctx.oidc?.client?.clientId ?? null,
    error: err.error,
    error_description: err.error_description,
    refresh_spent: params.grant_type === 'refresh_token' ? hash(params.refresh_token) : null,
  });
});
provider.on('grant.revoked', (ctx, grantId) => log({
  event: 'grant_revoked', grant_id: grantId, by: ctx.oidc?.route ?? null,
}));
provider.use(async (ctx, next) => {
  await next();
  if (ctx.method === 'GET' && ctx.status === 200 && ctx.body?.issuer === issuer && Array.isArray(ctx.body.scopes_supported)) {
    // Discovery lists only the OpenID scopes; a client picking scopes from it should see the resource's too.
    ctx.body.scopes_supported = [...ctx.body.scopes_supported, ...RESOURCE_SCOPES.split(' ')];
  }
  if (ctx.method === 'POST' && ctx.path === '/token/revocation') {
    const { entities = {}, params = {} } = ctx.oidc ?? {};
    const kind = ['RefreshToken', 'AccessToken'].find((k) => entities[k]) ?? null;
    log({
      event: 'revocation',
      client_id: ctx.oidc?.client?.clientId ?? null,
      status: ctx.status,
      token: hash(params.token),
      kind,
    });
  }
});

const callback = provider.callback();
server.on('request', (req, res) => {
  // OpenID Connect keeps offline_access only when prompt=consent is asked for too (Core 11);
  // MCP clients do not ask for it, and many providers do not insist, so asking for
  // offline_access implies it here (the consent page is shown, as the person must agree).
  const url = new URL(req.url, issuer);
  if (url.pathname === '/auth' && url.searchParams.get('scope')?.split(' ').includes('offline_access')) {
    const prompt = (url.searchParams.get('prompt') ?? '').split(' ').filter(Boolean);
    if (!prompt.includes('consent')) {
      url.searchParams.set('prompt', [...prompt, 'consent'].join(' '));
      req.url = `${url.pathname}${url.search}`;
    }
  }
  callback(req, res);
});

process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
});
process.on('SIGINT', () => process.exit(0));
if (args['exit-on-stdin-eof']) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

process.stdout.write(`${JSON.stringify({
  issuer,
  port,
  authorization_endpoint: `${issuer}/auth`,
  token_endpoint: `${issuer}/token`,
  registration_endpoint: `${issuer}/reg`,
  revocation_endpoint: `${issuer}/token/revocation`,
  introspection_endpoint: `${issuer}/token/introspection`,
  jwks_uri: `${issuer}/jwks`,
})}\n`);
