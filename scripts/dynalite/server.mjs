// Starts the DynamoDB-compatible test server (dynalite, in memory) for
// jobonce's integration tests: bound to 127.0.0.1 on a free port, tables
// active at once. Once it listens, it prints exactly one line to stdout,
// the endpoint URL (for example http://127.0.0.1:43121), and runs until
// SIGTERM or SIGINT.
//
// Usage: node scripts/dynalite/server.mjs   (after `npm ci` in this folder)
import dynalite from "dynalite";

// dynalite throws from a request whose client went away mid-request (a
// call cancelled by its context, a connection the tests cut): that request
// is over, not the server.
process.on("uncaughtException", (err) => {
  if (err?.code === "ECONNRESET" || err?.message === "aborted") return;
  console.error(`dynalite: ${err?.stack ?? err}`);
  process.exit(1);
});

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });

server.on("error", (err) => {
  console.error(`dynalite: cannot listen: ${err?.stack ?? err}`);
  process.exit(1);
});
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  process.stdout.write(`http://127.0.0.1:${port}\n`);
});

let stopping = false;
function stop(signal) {
  if (stopping) return;
  stopping = true;
  server.close((err) => {
    if (err) console.error(`dynalite: close after ${signal}: ${err?.stack ?? err}`);
    process.exit(0);
  });
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));
