mod agent;
mod sim_server;
