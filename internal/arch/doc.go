// Package arch holds no code: its tests check the rules ARCHITECTURE.md
// states about the whole module, so that the map stays true as the code
// moves.
//
//   - Layers: each package imports only what its row of the package map
//     allows (TestImports); the gateway never links the proxy, and the
//     proxy-only build links exactly the packages the map lists
//     (TestProxyOnlyBuild).
//   - One writer: outside lifecycle and store, no package opens a write
//     transaction or calls a store method that writes; they hold a
//     store.Reader (TestWritesOnlyInLifecycle).
//   - Size: no hand-written file over 800 lines, no function over 150,
//     the proxy's root package and the CLI within their budgets
//     (TestSizes).
//
// The tests read the module with the go command (go list) and go/types,
// as the compiler sees it.
package arch
