// The runbox TypeScript SDK: sandboxes of a `runbox serve` server for AI
// agents' shell commands. Start from Client.

export { Client, DEFAULT_HOST, parseSize, type ClientOptions, type CallOptions, type CreateOptions, type EgressRules } from "./client.js";
export { Sandbox, DEFAULT_GRACE_MS, newExecId, signalNumber, type Command, type RunOptions, type StartOptions } from "./sandbox.js";
export { Process } from "./process.js";
export { Files, type PathOptions } from "./files.js";
export { Result, Chunk, type Gap, type SandboxInfo, type ExposedPort, type Snapshot, type FileInfo, type ExecInfo, type ArchiveStats } from "./models.js";
export * from "./errors.js";
