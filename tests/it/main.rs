
mod sim_server;
