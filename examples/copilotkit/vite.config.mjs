import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// `npm run dev` serves the page with hot reload and sends the runtime's path to server.mjs
// (start it with PORT=3000); `npm run build` writes dist/, which server.mjs serves itself.
export default defineConfig({
  plugins: [react()],
  // CopilotKit's chat brings markdown, code highlighting and diagrams: big chunks, loaded lazily.
  build: { chunkSizeWarningLimit: 4096 },
  server: {
    proxy: { "/api/copilotkit": "http://127.0.0.1:3000" },
  },
});
