// anywidget entry point (AFM). Only a default export: anywidget treats a module
// with a named `render` export as a legacy widget and never calls `initialize`.
import { initialize, render } from "./lifecycle";

export default { initialize, render };
