// Starts the SQS-compatible test server (fauxqs) for jobonce's integration
// tests: bound to 127.0.0.1 on a free port, request logging off. Once it
// listens, it prints exactly one line to stdout, the endpoint URL (for
// example http://127.0.0.1:43121), and runs until SIGTERM or SIGINT.
//
// Usage: node scripts/fauxqs/server.mjs   (after `npm ci` in this folder)
import { buildApp } from "fauxqs";

const app = buildApp({ logger: false, defaultRegion: "us-east-1" });

let address;
try {
  address = await app.listen({ host: "127.0.0.1", port: 0 });
} catch (err) {
  console.error(`fauxqs: cannot listen: ${err?.stack ?? err}`);
  process.exit(1);
}
process.stdout.write(`${address}\n`);

let stopping = false;
async function stop(signal) {
  if (stopping) return;
  stopping = true;
  try {
    await app.close();
  } catch (err) {
    console.error(`fauxqs: close after ${signal}: ${err?.stack ?? err}`);
  }
  process.exit(0);
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));
