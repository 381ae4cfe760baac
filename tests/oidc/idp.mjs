// A real OpenID provider (npm oidc-provider) for Slipway's tests, configured by one JSON environment variable:
//   OIDC_TEST_CONFIG = {port, clients: [{client_id, client_secret, redirect_uris, post_logout_redirect_uris}],
//                       accounts: {<login>: {sub, email, email_verified, preferred_username, name, groups}},
//                       claims_in_id_token: bool, access_token_ttl: seconds, accounts_file: path?}
// accounts_file (optional) holds more accounts as JSON, read again at each sign-in: a test changes a person's
// claims (their groups) between two sign-ins by rewriting it.
// A client whose grant_types include refresh_token gets refresh tokens (Git provider tests refresh with them);
// revocation and introspection are on (unlinking revokes; the test Git server checks tokens at userinfo).
// More clients register at /reg (a server of a test that shares the provider).
// Sign-in uses the provider's own development login form (any password); consent is granted automatically.
import fs from 'node:fs';
import http from 'node:http';
import Provider from 'oidc-provider';

const config = JSON.parse(process.env.OIDC_TEST_CONFIG || '{}');
const port = config.port;
const issuer = `http://127.0.0.1:${port}`;
const accounts = config.accounts || {};

function changingAccounts() {
  if (!config.accounts_file || !fs.existsSync(config.accounts_file)) return {};
  return JSON.parse(fs.readFileSync(config.accounts_file, 'utf8'));
}

function claimsOf(login) {
  const known = changingAccounts()[login] || accounts[login];
  if (known) return { sub: login, ...known };
  return { sub: login, email: `${login}@example.com`, email_verified: true, preferred_username: login };
}

const provider = new Provider(issuer, {
  clients: (config.clients || []).map((client) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    ...client,
  })),
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => claimsOf(id) }),
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'groups', 'roles'],
  },
  // true: profile and email claims in the ID token as well; false: only from the userinfo endpoint.
  conformIdTokenClaims: !config.claims_in_id_token,
  pkce: { required: () => true },
  ttl: { AccessToken: config.access_token_ttl || 3600 },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  // Each refresh token works once, as GitLab's and Gitea's do: concurrent refreshes must not both use one.
  rotateRefreshToken: true,
  cookies: { keys: ['slipway-test-only-cookie-key'] },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    deviceFlow: { enabled: true },
    // Open dynamic client registration (RFC 7591): one provider serves several test servers, each its own client.
    registration: { enabled: true },
  },
  // No consent page: the tests are about Slipway, not about clicking "Continue".
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile');
    grant.addOIDCClaims(['sub', 'email', 'email_verified', 'name', 'preferred_username', 'groups', 'roles']);
    await grant.save();
    return grant;
  },
});

const server = http.createServer(provider.callback());
server.listen(port, '127.0.0.1', () => console.log('ready'));
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
